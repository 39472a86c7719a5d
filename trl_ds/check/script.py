"""Checks of `script=` before launch: the file or module (nothing of it runs), and its parser's verdict on the
arguments trl_ds passes (the script runs in one process only up to its parser: trl_ds/worker/script.py --check)."""
import os
import subprocess
import sys
from typing import List

from trl_ds.check.parser_cache import accepted_before, remember_accepted, verdict_key
from trl_ds.config.script_target import NO_PARSER, is_file_target, module_source, read_parser_kind, source_file
from trl_ds.config.values import value

TRL_SCRIPTS = ("sft", "dpo", "grpo", "reward", "kto", "rloo")  # trl/scripts/<name>.py: the trainer it builds
CHECK_TIMEOUT_S = 300  # importing transformers and TRL on a busy node


def check_script(cfg) -> List[str]:
    script = cfg.get("script")
    if not script:
        return [f"script_args={list(cfg.script_args)} is set without script=. Name the script "
                f"(script=train.py or script=trl.scripts.sft), or drop script_args."] if cfg.get("script_args") else []
    problems = _file_problems(script) if is_file_target(script) else _module_problems(script)
    return problems or _trainer_problems(cfg, script)


def _file_problems(path: str) -> List[str]:
    if not os.path.isfile(path):
        where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
        return [f"script={path}: no such file{where}. Give the path of your training script, e.g. script=train.py."]
    if not path.endswith(".py"):
        return [f"script={path}: not a Python file (.py). Give your training script, e.g. script=train.py."]
    try:
        with open(path, "rb") as f:
            compile(f.read(), path, "exec")
    except SyntaxError as err:
        return [f"script={path}: not valid Python: {err.msg} at line {err.lineno}. Fix the script."]
    except (OSError, ValueError) as err:
        return [f"script={path}: cannot be read as Python ({err}). Fix the script."]
    return []


def _module_problems(name: str) -> List[str]:
    if module_source(name) is None:
        return [f"script={name}: no importable Python module of that name here. Give a module that "
                f"`python -m {name}` runs (e.g. script=trl.scripts.sft), or a file path (script=./{name}.py)."]
    return []


def _trainer_problems(cfg, script: str) -> List[str]:
    """TRL's own scripts build one trainer each: the trainer group (what the plan and checks assume) must name it."""
    path = source_file(script)
    folder, name = os.path.split(os.path.splitext(path)[0])
    if os.path.basename(folder) != "scripts" or os.path.basename(os.path.dirname(folder)) != "trl":
        return []
    trainer = value(cfg.trainer.name)
    if name in TRL_SCRIPTS and name != trainer:
        return [f"script={script} trains TRL's {name} trainer but trainer={trainer}: the plan, the checks and "
                f"trainer.yaml follow the trainer group. Set trainer={name}."]
    return []


def parser_verdict(cfg, run_dir: str) -> List[str]:
    """The script's own parser on the arguments its ranks will get (the run dir's files and script_args); a verdict
that accepted the same script and arguments before is not asked again (trl_ds/check/parser_cache.py)."""
    path = source_file(cfg.script)
    if read_parser_kind(path) == NO_PARSER:
        return []
    key = verdict_key(cfg, run_dir)  # of what is checked now, kept below if the parser accepts it
    if accepted_before(key):
        return []
    cmd = [sys.executable, "-m", "trl_ds.worker.script", "--check", run_dir]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [f"script={cfg.script}: its argument parser did not return within {CHECK_TIMEOUT_S} s when trl_ds "
                f"ran the script up to it. Check what the script does before parsing its arguments."]
    if done.returncode == 0:
        remember_accepted(key, cfg.script)
        return []
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return [f"script={cfg.script}: its parser refused the arguments it would get "
            f"(script_args={list(cfg.script_args)} after the run dir's trainer arguments): "
            f"{lines[-1].strip() if lines else f'exit code {done.returncode}'}. Fix script_args or the trainer keys."]
