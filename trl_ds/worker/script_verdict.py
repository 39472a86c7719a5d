"""What the parser check (worker/script.py --check) sees in the arguments a script's parser returned, before any rank:
the DeepSpeed config its TrainingArguments name, and transformers' own DeepSpeed mismatch check on them (what
trainer_config_finalize would raise on every rank after spawn). Each problem is one REFUSAL-prefixed line on stderr,
naming the argument and the fix; check/script.py prints them."""
import os
import re
from typing import List

from trl_ds.config.script_target import REFUSAL  # noqa: F401  (worker/script.py prints it)

MISMATCH = re.compile(r"^- ds (\S+)=(.*) vs hf (\S+)(?: \(calculated\))?=(.*)$")
DERIVED = "train_batch_size"  # transformers' "train_batch_size (calculated)": micro-batch × accumulation × world
# transformers' argument (as the mismatch names it) -> trl_ds's key that sets it in both files
TRL_DS_KEY = {"per_device_train_batch_size": "trainer.per_device_train_batch_size",
              "gradient_accumulation_steps": "batch.global_size", "train_batch_size": "batch.global_size",
              "max_grad_norm": "trainer.max_grad_norm", "learning_rate": "trainer.learning_rate",
              "adam_beta1+adam_beta2": "trainer.adam_beta1 / trainer.adam_beta2",
              "adam_epsilon": "trainer.adam_epsilon",
              "weight_decay": "trainer.weight_decay", "fp16|fp16_full_eval": "precision.dtype",
              "bf16|bf16_full_eval": "precision.dtype", "warmup_steps": "trainer.warmup_steps"}


def training_arguments_of(parsed) -> list:
    """The TrainingArguments among what a parser returned (a tuple of dataclasses, maybe with leftover strings)."""
    from transformers import TrainingArguments

    items = parsed if isinstance(parsed, (tuple, list)) else [parsed]
    return [item for item in items if isinstance(item, TrainingArguments)]


def problems(parsed, cfg, expected_deepspeed: str) -> List[str]:
    found = []
    for args in training_arguments_of(parsed):
        found += deepspeed_problems(args, cfg, expected_deepspeed)
        found += mismatch_problems(args, cfg)
    return list(dict.fromkeys(found))


def deepspeed_problems(args, cfg, expected: str) -> List[str]:
    given = args.deepspeed
    if given is None or (isinstance(given, str) and os.path.abspath(given) == os.path.abspath(expected)):
        return []
    shown = "<a dict of its own>" if isinstance(given, dict) else given
    where = _where(cfg, "deepspeed")
    return [f"script={cfg.script}: {where} deepspeed={shown}, another DeepSpeed config than the run dir's "
            f"({os.path.basename(expected)}): the engine would not be what trl_ds planned and records. Drop it "
            f"and set ZeRO, offload and the rest through trl_ds's keys (zero=, offload=, ...), or bring that file as "
            f"deepspeed.from_file={shown}."]


def mismatch_problems(args, cfg) -> List[str]:
    config = getattr(args, "hf_deepspeed_config", None)
    lines = [line.strip() for line in getattr(config, "mismatches", None) or []]
    matched = [MISMATCH.match(line) for line in lines]
    names = {m.group(3) for m in matched if m}
    found = []
    for line, match in zip(lines, matched):
        if not match:
            found.append(f"script={cfg.script}: transformers refuses its arguments against the run dir's DeepSpeed "
                         f"config: {line}. Set the value through trl_ds's keys, or drop it from script_args.")
            continue
        ds_key, ds_val, hf_key, hf_val = match.groups()
        if hf_key == DERIVED and names & {"per_device_train_batch_size", "gradient_accumulation_steps"}:
            continue  # micro-batch × accumulation × world: the line of its cause says it
        key = TRL_DS_KEY.get(hf_key, "the trl_ds key that sets it")
        found.append(f"script={cfg.script}: {_where(cfg, hf_key.split('|')[0].split('+')[0])} {hf_key}={hf_val} where "
                     f"the run dir's DeepSpeed config has {ds_key}={ds_val}; transformers refuses that mismatch on "
                     f"every rank. Set it through trl_ds's key ({key}) and drop it from the script's arguments.")
    return found


def _where(cfg, name: str) -> str:
    """Which argument gave the value: script_args, or the script itself (its own defaults, file or code)."""
    args = [str(a) for a in cfg.script_args]
    for flag in (f"--{name}", f"--{name.replace('_', '-')}"):
        for i, arg in enumerate(args):
            if arg == flag and i + 1 < len(args):
                return f"script_args' {flag} {args[i + 1]} gives"
            if arg.startswith(flag + "="):
                return f"script_args' {arg} gives"
    return "the script's own arguments give"
