"""A rank keeps out the packages its run never uses, before transformers is imported.

peft imports bitsandbytes whenever it is installed: about 1 s of CPU per rank here (2.6 s on its own, and a
warning about a missing `kernels` package), paid by every launch although only a quantized base (peft=qlora, or
peft.load_in_8bit) uses it. scripts/bench_rank_start.py measures it."""
import os
import sys

import yaml

from trl_ds.rundir.layout import RESOLVED_CONFIG


def keep_out_unused_packages(run_dir: str) -> None:
    with open(os.path.join(run_dir, RESOLVED_CONFIG)) as f:
        peft = (yaml.safe_load(f) or {}).get("peft") or {}
    if not (peft.get("load_in_4bit") or peft.get("load_in_8bit")):
        # None in sys.modules: importlib.util.find_spec answers None and `import bitsandbytes` raises ImportError,
        # which is how peft and transformers find it absent
        sys.modules.setdefault("bitsandbytes", None)
