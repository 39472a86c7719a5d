"""The run dir, the only thing ranks read: every file and folder name in it, and the helpers that read and write it.
Paths are relative to the run dir unless a function takes `run_dir`.
"""
import json
import os
from typing import Any, Optional

from omegaconf import OmegaConf

# Written before launch by the launching process
RESOLVED_CONFIG = "config.yaml"  # the composed config; ranks re-type it with the schema
OVERRIDES = "overrides.yaml"  # the command-line overrides of this run (a sweep point's coordinates)
DS_CONFIG = "ds_config.json"
TRAINER_YAML = "trainer.yaml"  # TRL's own argument names: `trl <trainer> --config trainer.yaml` reads it
ACCELERATE_YAML = "accelerate.yaml"
PLAN = "plan.json"  # the memory and step-time estimate made before launch
ENV = "env.json"  # what the launching machine has
LAUNCH_SCRIPT = "launch.sh"
SBATCH_SCRIPT = "sbatch.sh"
HOSTFILE = "hostfile"
DEEPSPEED_ENV = ".deepspeed_env"  # launcher=deepspeed: NAME=value lines its runner passes to every rank (DS_ENV_FILE)
TINY_DATA_DIR = "data"  # the built-in dataset, written at build time
SCRIPT_DIR = "script"  # script=FILE: the copy every rank runs, so the script reaches each node with the run dir
NVME_DIR = "nvme"  # NVMe swap files, unless offload.nvme_path names another place

# Written by the ranks
TINY_MODEL_DIR = "model"  # the tiny model, built and saved here by the first rank
METRICS = "metrics.jsonl"  # rank 0: one line per logging step
MEMORY_DIR = "memory"  # every rank: memory/rank_K.json
SUMMARY = "summary.json"  # rank 0 at the end; the launching process when a run fails, stops or is skipped
FINAL_MODEL_DIR = "final_model"  # the trained weights, loadable with from_pretrained
CHECKPOINT_DIR = "trainer"  # transformers' output_dir: checkpoint-N folders
CHECKPOINT_MARKER = "trl_ds_complete.json"  # in a checkpoint-N folder once every rank has saved it
DAMAGED_SUFFIX = ".damaged"  # checkpoint-N.damaged-<time>: failed verification; kept, never loaded or rotated
UNIVERSAL_MARKER = "trl_ds_universal_complete.json"  # in checkpoint-N/global_stepN_universal once converted
LATEST_UNIVERSAL = "latest_universal"  # in checkpoint-N: the universal tag DeepSpeed's load_universal reads

# Written per node under logs/node_N by the launcher and the ranks
LOGS_DIR = "logs"
PROGRESS_DIR = "progress"  # every rank: progress/rank_K.json, its peak memory so far, for the live display
SLURM_JOB_ID = "slurm_job_id"  # launcher=slurm: the submitted job, so `trl-ds watch` can follow it
FAILURE_FILE = "failure.json"  # why this node's launch failed
JOINED_FILE = "joined"  # written by a node's first rank once the process group formed (every rank joined)

# Written by the launching process: which launch the run dir's summary.json must come from to be the latest's
LATEST_LAUNCH = "latest_launch"  # node 0's launch id (rundir/lifeline.py), written with the run dir's files

# Written by the launching process while it runs, removed when it exits
LAUNCH_LOCK = "launch.lock"  # node 0's; launch.nodeN.lock on node N


def launch_lock(node_rank: int) -> str:
    return LAUNCH_LOCK if node_rank == 0 else f"launch.node{node_rank}.lock"


def node_log_dir(run_dir: str, node_rank: int) -> str:
    """Each node's rank logs apart: torchrun names them by local rank, which repeats on every node."""
    return f"{run_dir}/{LOGS_DIR}/node_{node_rank}"


def memory_file(rank: int) -> str:
    return f"{MEMORY_DIR}/rank_{rank}.json"


def script_copy(run_dir: str, script: str) -> str:
    """Where a user's script file lies in the run dir: script/<its own name> (argparse's prog is that name)."""
    return os.path.join(run_dir, SCRIPT_DIR, os.path.basename(script))


def copy_script(script: str, run_dir: str) -> None:
    """Copied whole, then renamed: with a shared run dir every node writes it (same bytes), and a rank may read it."""
    import shutil

    path = script_copy(run_dir, script)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    shutil.copyfile(script, tmp)
    os.replace(tmp, path)


def nvme_path(cfg, run_dir: str) -> str:
    """Where NVMe offload swaps: offload.nvme_path, else the run dir's own nvme/ folder."""
    return cfg.offload.nvme_path or os.path.join(run_dir, NVME_DIR)


def write_json(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)  # readers never see half a file


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def read_json_or_none(path: str) -> Any:
    """A small file trl_ds wrote, or None when it is missing, empty or cut short (a kill, a full disk)."""
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def read_yaml_or_none(path: str) -> Optional[dict]:
    """A YAML mapping trl_ds wrote (config.yaml), or None when it is missing, empty, cut short or not a mapping."""
    import yaml

    try:
        with open(path) as f:
            loaded = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None
    return loaded if isinstance(loaded, dict) else None


def read_summary(run_dir: str) -> Any:
    """summary.json as it reads in the folder it lies in now: a run dir copied elsewhere (cp -r) names its own folder,
    and a log it names inside the original names the copy's. None when missing or cut short."""
    summary = read_json_or_none(os.path.join(run_dir, SUMMARY))
    was = summary.get("run_dir") if isinstance(summary, dict) else None
    if not isinstance(was, str) or was == run_dir:
        return summary
    log = summary.get("log")
    if isinstance(log, str) and log.startswith(was.rstrip(os.sep) + os.sep):
        summary["log"] = os.path.join(run_dir, os.path.relpath(log, was))
    return {**summary, "run_dir": run_dir}


def adopt_summary(run_dir: str) -> None:
    """A launch in a copied, complete run dir rewrites the copy's summary.json to name its own folder."""
    summary = read_summary(run_dir)
    if isinstance(summary, dict) and summary != read_json_or_none(os.path.join(run_dir, SUMMARY)):
        write_json(os.path.join(run_dir, SUMMARY), summary)


def summary_is_latest(run_dir: str) -> bool:
    """summary.json names the launch that wrote it; one of another launch than the latest that started its ranks is
    an earlier launch's (the latest was killed before writing one). Ids, not file times: a copy (cp -r) keeps them.
    Without either id (an older trl_ds, launch.sh run by hand) it counts as the latest's."""
    summary = read_json_or_none(os.path.join(run_dir, SUMMARY))
    try:
        with open(os.path.join(run_dir, LATEST_LAUNCH)) as f:
            latest = f.read().strip()
    except OSError:
        return True
    written_by = summary.get("launch_id") if isinstance(summary, dict) else None
    return not latest or not written_by or written_by == latest


def write_text(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode & ~current_umask())


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def load_run_config(run_dir: str):
    """The resolved config, re-typed by the schema, as every rank sees it."""
    import dataclasses

    from omegaconf import open_dict

    from trl_ds.config.schema import OffloadConfig, RunConfig, ZeroConfig

    saved = OmegaConf.load(os.path.join(run_dir, RESOLVED_CONFIG))
    # DeepSpeed keys given by their own names (+zero.NAME, +offload.NAME, an imported file's) are not in the typed
    # schema: a merge refuses them, so they are added the way the composition added them.
    extra = {}
    for group, schema in (("zero", ZeroConfig), ("offload", OffloadConfig)):
        declared, node = {f.name for f in dataclasses.fields(schema)}, saved.get(group) or {}
        extra[group] = {k: node.pop(k) for k in list(node) if k not in declared}
    cfg = OmegaConf.merge(OmegaConf.structured(RunConfig), saved)
    for group, keys in extra.items():
        with open_dict(cfg[group]):
            cfg[group].update(keys)
    return cfg
