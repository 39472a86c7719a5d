"""A user's script on a rank: `python -m trl_ds.worker.script <run dir>`, started by torchrun or the deepspeed launcher
in place of trl_ds.worker.train (config key `script=`).

Prepared as the worker's process, with transformers' classes wrapped to record into the run dir
(worker/script_hooks.py), the script runs unchanged as __main__ with the arguments its parser expects
(worker/script_argv.py). `--check <run dir>` (the launcher, before spawning ranks): run it only up to its parser and
print the verdict: exit 0 once it parsed, 2 with one line when it refused."""
import atexit
import json
import os
import runpy
import sys

from trl_ds.config.script_target import (
    HF_FILE_PARSER,
    IMPORTED,
    convention,
    is_file_target,
    is_folder_target,
    own_modules,
    source_file,
)
from trl_ds.rundir.layout import SUMMARY, load_run_config, script_copy, write_json
from trl_ds.rundir.lifeline import LAUNCH_ID, watch_launcher
from trl_ds.short_lived import skip_final_collection
from trl_ds.worker.patches import Parsed, as_the_ranks_see_it, stop_after_parsing, under_its_own_values
from trl_ds.worker.script_argv import deepspeed_path, resolved_trainer_args, script_argv, training_values
from trl_ds.worker.unused_packages import skip_muon

RUN_DIR_ENV = "TRL_DS_RUN_DIR"  # for scripts that want to find the run dir's files themselves
CHECK_FLAG = "--check"


def main(argv) -> int:
    run_dir = os.path.abspath([a for a in argv if not a.startswith("--local_rank") and a != CHECK_FLAG][0])
    cfg = load_run_config(run_dir)
    os.environ[RUN_DIR_ENV] = run_dir
    if CHECK_FLAG in argv:
        return check(cfg, run_dir)
    skip_muon(run_dir)  # as the worker (a script may use bitsandbytes itself: that one stays visible)
    from trl_ds.worker.bootstrap import start_rank
    from trl_ds.worker.patches import install_recording
    from trl_ds.worker.script_hooks import Recorder

    state = start_rank(run_dir, cfg)  # the worker's start-up (worker/bootstrap.py)
    recorder = Recorder(cfg, run_dir, state)
    install_recording(recorder)
    run_script(cfg, run_dir)
    if recorder.trained == 0 and state.is_main_process:
        write_json(os.path.join(run_dir, SUMMARY), untrained_summary(cfg, run_dir))
    leave_process_group()
    return 0


def leave_process_group() -> None:
    """Scripts rarely end their process group, and gloo's threads left to the interpreter's exit can abort a rank after
    training; the ranks meet first, so none tears down while another still communicates."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def run_script(cfg, run_dir: str) -> None:
    """A file runs from the run dir's copy (on every node the run dir reaches, as checked); a folder with __main__.py
    where it lies, as `python some_folder` runs it; a module as the environment installs it."""
    original = source_file(cfg.script)
    if is_folder_target(cfg.script):
        path = os.path.abspath(cfg.script)
    else:
        path = script_copy(run_dir, cfg.script) if is_file_target(cfg.script) else original
    # the convention from the original (its helper modules lie beside it), else from the copy (a node without it)
    kind = convention(cfg, original if original and os.path.exists(original) else path).kind
    sys.argv = [path, *script_argv(kind, run_dir, list(cfg.script_args))]
    if kind == HF_FILE_PARSER:
        under_its_own_values(training_values(resolved_trainer_args(run_dir)))
    if is_file_target(cfg.script):
        # as `python train.py` puts the script's folder first: modules beside it import where that folder is reachable
        sys.path.insert(0, os.path.dirname(cfg.script))
        runpy.run_path(path, run_name="__main__")
    elif is_folder_target(cfg.script):
        runpy.run_path(path, run_name="__main__")  # puts the folder first on sys.path itself
    else:
        runpy.run_module(cfg.script, run_name="__main__", alter_sys=True)


def untrained_summary(cfg, run_dir: str) -> dict:
    """The script ended without training a transformers Trainer: nothing the recording hooks could see."""
    return {"status": "completed", "script": cfg.script, "trainers_trained": 0, "run_dir": run_dir,
            "launch_id": os.environ.get(LAUNCH_ID),
            "missing": ["metrics.jsonl", "memory/rank_K.json", "final_loss", "samples_per_second"],
            "missing_why": "the script trained no transformers Trainer, which is where trl_ds records"}


def check(cfg, run_dir: str) -> int:
    parsed = []
    stop_after_parsing(parsed)
    as_the_ranks_see_it(cfg)
    try:
        run_script(cfg, run_dir)
    except Parsed:
        return verdict(parsed, cfg, run_dir)
    except SystemExit as done:  # argparse printed its own "error: ..." line on stderr
        return 2 if done.code else 0
    except Exception as err:  # the parser's ValueError (unknown arguments), or the dataclasses' own checks
        text = str(err).strip()
        print(f"{type(err).__name__}: {text.splitlines()[-1] if text else ''}", file=sys.stderr)
        return 2
    print("the script ended without calling its argument parser", file=sys.stderr)
    print(f"{IMPORTED}{json.dumps(own_modules(sys.modules))}")
    return 0


def verdict(parsed: list, cfg, run_dir: str) -> int:
    """The parser accepted: what it returned must name the run dir's DeepSpeed config and pass transformers' own
    mismatch check against it (worker/script_verdict.py); each problem one line."""
    from trl_ds.worker.script_verdict import REFUSAL, problems

    found = problems(parsed[0], cfg, deepspeed_path(run_dir)) if parsed else []
    for line in found:
        print(f"{REFUSAL}{line}", file=sys.stderr)
    print(f"{IMPORTED}{json.dumps(own_modules(sys.modules))}")  # what a kept verdict must find unchanged
    return 2 if found else 0


def end_here(code: int) -> None:
    """End a finished rank without the interpreter's teardown: atexit handlers run, C++ destructors do not (a thread
    a library left joinable aborted ranks after completed runs: TRL's rloo.py at ZeRO-3, even after
    leave_process_group)."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    if CHECK_FLAG not in sys.argv:
        watch_launcher()  # never outlive the launch: a SIGKILLed launcher ends its ranks within a second
    skip_final_collection()
    end_here(main(sys.argv[1:]))
