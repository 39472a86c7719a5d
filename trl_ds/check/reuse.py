"""May this launch write into an existing run dir? Only a relaunch of the same config (to resume, or a real launch
after its own dry run); a config.yaml a kill left empty or cut is replaced, with one line saying so.
"""
import os
import sys
from typing import Dict, List

import yaml
from omegaconf import OmegaConf

from trl_ds.rundir.layout import RESOLVED_CONFIG, read_yaml_or_none

# Keys that may change between launches of the same run: how it is started, not what it trains. The cluster and the
# ZeRO setup may change too: resume converts a checkpoint of another shape (trl_ds/rundir/universal.py). So may
# offload.ratio: it moves whole sub-groups between device and CPU, and the checkpoint's sub-groups stay the same.
RELAUNCH_KEYS = ("dry_run", "resume", "cluster.", "zero.", "offload.ratio", "trainer.max_steps",
                 "trainer.num_train_epochs", "preflight.", "launcher.")


def check_run_dir(cfg, run_dir: str) -> List[str]:
    saved_path = os.path.join(run_dir, RESOLVED_CONFIG)
    if not os.path.isfile(saved_path):
        return []
    loaded = read_yaml_or_none(saved_path)
    if not loaded:
        print(f"trl_ds: {saved_path} is empty or cut short (a kill while it was written); this launch's config "
              f"replaces it", file=sys.stderr)
        return []
    saved = flatten(loaded)
    now = flatten(yaml.safe_load(OmegaConf.to_yaml(cfg, resolve=True)))
    changed = sorted(k for k in saved.keys() | now.keys()
                     if saved.get(k) != now.get(k) and not k.startswith(RELAUNCH_KEYS))
    if not changed:
        return []
    shown = ", ".join(f"{k}: {saved.get(k)!r} → {now.get(k)!r}" for k in changed[:5])
    more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
    return [f"hydra.run.dir={run_dir} already holds a run of another config ({shown}{more}); trl_ds does not "
            f"overwrite it. Use a new hydra.run.dir, or the same overrides to resume that run."]


def flatten(tree: Dict, prefix: str = "") -> Dict:
    flat = {}
    for key, val in tree.items():
        if isinstance(val, dict) and val:
            flat.update(flatten(val, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = val
    return flat
