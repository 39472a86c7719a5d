"""Checks of `script=` before launch: the file or module (nothing of it runs), and its parser's verdict on the
arguments trl_ds passes (the script runs in one process only up to its parser: trl_ds/worker/script.py --check)."""
import json
import os
import subprocess
import sys
from typing import List

from trl_ds.check.parser_cache import accepted_before, remember_accepted, verdict_key
from trl_ds.config.script_target import (
    AUTO,
    CONVENTIONS,
    HF_FILE_PARSER,
    HF_PARSER,
    IMPORTED,
    NO_PARSER,
    REFUSAL,
    TRL_PARSER,
    code_names,
    convention,
    is_file_target,
    is_folder_target,
    module_source,
    source_file,
)
from trl_ds.config.values import value
from trl_ds.rundir.layout import DS_CONFIG, read_json_or_none

TRL_SCRIPTS = ("sft", "dpo", "grpo", "reward", "kto", "rloo")  # trl/scripts/<name>.py: the trainer it builds
CHECK_TIMEOUT_S = 300  # importing transformers and TRL on a busy node


def check_script(cfg) -> List[str]:
    script = cfg.get("script")
    stated = str(cfg.get("script_convention") or AUTO)
    if stated not in CONVENTIONS:
        return [f"script_convention={stated}: not a convention. Choose one of {', '.join(CONVENTIONS)} "
                f"(docs/scripts.md, 'What the script receives')."]
    if not script:
        return [f"script_args={list(cfg.script_args)} is set without script=. Name the script "
                f"(script=train.py or script=trl.scripts.sft), or drop script_args."] if cfg.get("script_args") else []
    if is_folder_target(script):
        problems = _folder_problems(script)
    else:
        problems = _file_problems(script) if is_file_target(script) else _module_problems(script)
    return problems or _trainer_problems(cfg, script)


def _folder_problems(path: str) -> List[str]:
    main = os.path.join(path, "__main__.py")
    if not os.path.isfile(main):
        return [f"script={path}: a folder without __main__.py, which `python {path}` would run. Add one, or give "
                f"the training script in it (script={os.path.join(path, 'train.py')})."]
    return _file_problems(main)


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
    found = convention(cfg)
    for line in convention_notes(cfg, found):
        print(f"trl_ds: {line}")
    refused = optimizer_problems(cfg, run_dir)
    if refused or found.kind == NO_PARSER:
        return refused
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
        imported = [line[len(IMPORTED):] for line in done.stdout.splitlines() if line.startswith(IMPORTED)]
        remember_accepted(key, cfg.script, json.loads(imported[-1]) if imported else [])
        return []
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    refusals = [line[len(REFUSAL):] for line in lines if line.startswith(REFUSAL)]
    if refusals:
        return refusals
    return [f"script={cfg.script}: its parser refused the arguments it would get "
            f"(script_args={list(cfg.script_args)} after the run dir's trainer arguments): "
            f"{lines[-1].strip() if lines else f'exit code {done.returncode}'}. Fix script_args or the trainer keys."]


GETS = {TRL_PARSER: "`--config <run dir>/script_config.yaml` (trainer.yaml), then script_args",
        HF_PARSER: "trainer.yaml's TrainingArguments as flags, then script_args",
        HF_FILE_PARSER: "script_args, and trainer.yaml's TrainingArguments under the values of the file or dict it "
                        "parses"}
TORCH_OPTIMIZERS = {"AdamW", "Adam", "SGD", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam", "Adafactor"}


def convention_notes(cfg, found) -> List[str]:
    """What the script will receive, said before launch, and the settings it cannot receive."""
    how = "stated by script_convention=" if found.stated else \
        f"found in {os.path.basename(found.where)}" if found.where else "found in none of its code"
    if found.kind == NO_PARSER:
        lines = [f"script={cfg.script}: no HfArgumentParser or TrlParser in its code or the modules it imports from "
                 f"its folder or PYTHONPATH ({how}): it gets script_args only, and must give its TrainingArguments "
                 f"the run dir's DeepSpeed config itself ($TRL_DS_RUN_DIR/ds_config.json). If it parses another way, "
                 f"state it: script_convention=trl, hf or hf_file."]
    else:
        lines = [f"script={cfg.script}: {found.kind} convention ({how}): it gets {GETS[found.kind]}."]
    peft = value(cfg.peft.name) if cfg.get("peft") else "none"
    if peft != "none" and found.kind != TRL_PARSER:
        lines.append(f"peft={peft}: a script of the {found.kind} convention receives no peft or quantization settings "
                     f"(TrainingArguments has none): it trains the model its own code builds, while the plan assumes "
                     f"{peft}. Build the adapters in the script, or drop peft=.")
    return lines


def optimizer_problems(cfg, run_dir: str) -> List[str]:
    """An Accelerator loop with DeepSpeedPlugin and its own torch optimizer against ds_config.json's optimizer block:
    accelerate refuses it on every rank ("You cannot specify an optimizer in the config file and in the code")."""
    ds_config = read_json_or_none(os.path.join(run_dir, DS_CONFIG)) or {}
    names = code_names(source_file(cfg.script))
    if "optimizer" not in ds_config or "DeepSpeedPlugin" not in names or "DummyOptim" in names:
        return []
    built = sorted(names & TORCH_OPTIMIZERS)
    if not built:
        return []
    return [f"script={cfg.script}: it builds its own optimizer ({', '.join(built)}) for an Accelerator with "
            f"DeepSpeedPlugin, and the run dir's ds_config.json has an optimizer block: accelerate refuses both on "
            f"every rank. Pass accelerate.utils.DummyOptim(params, lr=...) where the config has an optimizer block "
            f"(docs/scripts.md, 'An Accelerator loop')."]
