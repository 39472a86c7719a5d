"""What each trainer, LoRA and Ulysses need, checked in the launching process before any rank starts. Pure rules take
the config and return problems; the `*_here` rules look at this machine and run for real launches only. No torch.
"""
import dataclasses
import importlib
import importlib.util
import math
import os
from typing import List, Optional

from omegaconf import ListConfig, OmegaConf

from trl_ds.check.argument_values import report_to_choices
from trl_ds.check.trl_arguments import check_arguments
from trl_ds.config.batch import Batch
from trl_ds.config.data_files import named_for_split
from trl_ds.config.schema import TrainerConfig
from trl_ds.config.values import LOCAL_DATA_SUFFIXES, is_local_path, value, world_size
from trl_ds.plan.trainers import GENERATING, KTO_NO_KL
from trl_ds.rundir.trainer_config import TRAINER_ONLY

# Any one of these column sets will do (TRL's dataset formats for each trainer).
NEEDED_COLUMNS = {
    "sft": (("text",), ("messages",), ("prompt", "completion")),
    "dpo": (("chosen", "rejected"),),
    "reward": (("chosen", "rejected"),),
    "grpo": (("prompt",),),
    "kto": (("prompt", "completion", "label"), ("chosen", "rejected")),  # pairs: KTOTrainer unpairs them
    "rloo": (("prompt",),),
}
EXAMPLE_RECORD = {
    "sft": '{"text": "..."}',
    "dpo": '{"prompt": "...", "chosen": "...", "rejected": "..."}',
    "reward": '{"prompt": "...", "chosen": "...", "rejected": "..."}',
    "grpo": '{"prompt": "...", ...}  (other columns reach the reward functions as keywords)',
    "kto": '{"prompt": "...", "completion": "...", "label": true}',
    "rloo": '{"prompt": "...", ...}  (other columns reach the reward functions as keywords)',
}

# The packages transformers' is_<name>_available() looks for (integrations/integration_utils.py); kubeflow needs none.
LOGGER_PACKAGES = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",), "mlflow": ("mlflow",),
                   "azure_ml": ("azureml",), "comet_ml": ("comet_ml",), "neptune": ("neptune",),
                   "trackio": ("trackio",), "codecarbon": ("codecarbon",), "clearml": ("clearml",),
                   "dagshub": ("dagshub",), "flyte": ("flytekit",), "dvclive": ("dvclive",), "swanlab": ("swanlab",)}
SP_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3")
TINY_SPLITS = ("train", "test")
BUILTIN_REWARD = "trl_ds.worker.rewards.arithmetic_reward"


def check_trainer_options(cfg) -> List[str]:
    """A trainer-only option changed for a trainer that has no such argument, and each trainer's own needs."""
    t, name = cfg.trainer, value(cfg.trainer.name)
    defaults = {f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(TrainerConfig)}
    problems = [f"trainer.{k}={_show(t[k])} is an option of trainer={'/'.join(owners)} only; trainer={name} has no "
                f"such argument. Drop it, or use trainer={owners[0]}."
                for k, owners in TRAINER_ONLY.items() if name not in owners and _plain(t[k]) != defaults[k]]
    problems += _report_to_problems(t.report_to)
    if name in GENERATING:
        problems += _generation_needs(t, name)
    if name == "kto":
        problems += _kto_needs(t)
    if name == "dpo" and t.beta <= 0:
        # dpo_trainer.py: every loss_type scales the log-ratio margin by beta (sigmoid: -logsigmoid(beta * delta)),
        # or divides by it (ipo): at 0 the loss is log 2 with zero gradients; below 0 it prefers the rejected answer
        problems.append(f"trainer.beta={t.beta} with trainer=dpo trains nothing: DPO's loss scales the chosen-rejected "
                        f"margin by beta (-log sigmoid(beta * margin)), so it stays log 2 with zero gradients at 0 and "
                        f"prefers the rejected answers below 0. Set trainer.beta=0.1 (TRL's default).")
    return problems


def _generation_needs(t, name: str) -> List[str]:
    problems = []
    if not t.reward_funcs:
        problems.append(f"trainer={name} needs at least one reward function. Set trainer.reward_funcs="
                        f"[{BUILTIN_REWARD}] or your own, e.g. trainer.reward_funcs=[my_pkg.rewards.correctness].")
    if t.num_generations < 2:
        problems.append(f"trainer.num_generations={t.num_generations} must be at least 2: {name.upper()} compares "
                        f"the completions of one prompt. Set trainer.num_generations=4.")
    if t.max_completion_length < 1:
        problems.append(f"trainer.max_completion_length={t.max_completion_length} must be at least 1.")
    return problems


def _kto_needs(t) -> List[str]:
    """KTOTrainer's own refusals (kto_trainer.py __init__), before launch: a loss that estimates the KL term pairs each
    prompt with another example's completion of the same micro-batch, in the data's order (the micro-batch's size:
    check_kto_batch)."""
    args, problems = t.args or {}, []
    if t.beta <= 0:
        # kto_trainer.py: 1 - sigmoid(beta * (log-ratio - kl)): a constant 0.5 with zero gradients at 0
        problems.append(f"trainer.beta={t.beta} with trainer=kto trains nothing: KTO's loss scales the log-ratio by "
                        f"beta (1 - sigmoid(beta * (log-ratio - KL))), so it is a constant at 0 and favours the wrong "
                        f"side below 0. Set trainer.beta=0.1 (TRL's default).")
    strategy = args.get("train_sampling_strategy", "sequential")
    if args.get("loss_type", "kto") != KTO_NO_KL and strategy != "sequential":
        problems.append(f"trainer.args.train_sampling_strategy={strategy} with trainer=kto: KTO's KL completions are "
                        f"built from neighbours in the data's order, which only sequential sampling keeps. Drop it, "
                        f"or add +trainer.args.loss_type={KTO_NO_KL} (no KL term).")
    return problems


def check_passthrough(cfg) -> List[str]:
    """trainer.args against the trainer's TRL config class; the trainer group's own keys are set there instead."""
    own = {f.name for f in dataclasses.fields(TrainerConfig)} - {"args", "from_trl_config"}
    args = OmegaConf.to_container(cfg.trainer.args)
    return check_arguments(value(cfg.trainer.name), args, own)


def eval_notes(cfg) -> List[str]:
    """Evaluation sizes set while evaluation is off: TRL ignores them, so they are printed, not refused."""
    t = cfg.trainer
    if value(t.eval_strategy) != "no":
        return []
    unused = [f"trainer.eval_steps={t.eval_steps}"] if t.eval_steps is not None else []
    unused += [f"trainer.per_device_eval_batch_size={t.per_device_eval_batch_size}"] \
        if t.per_device_eval_batch_size != TrainerConfig.per_device_eval_batch_size else []
    return [f"{' and '.join(unused)} not used: trainer.eval_strategy=no, nothing evaluates (set "
            f"trainer.eval_strategy=steps or epoch to evaluate)."] if unused else []


def check_eval(cfg) -> List[str]:
    t = cfg.trainer
    problems = [f"trainer.{k}={t[k]} must be at least 1." for k in ("eval_steps", "per_device_eval_batch_size")
                if t[k] is not None and t[k] < 1]
    if value(t.eval_strategy) == "no":  # data named for evaluation that never runs: a misread; the sizes: notes
        named = t.eval_dataset_name
        return problems + ([f"trainer.eval_dataset_name={named} with trainer.eval_strategy=no: nothing would "
                            f"evaluate. Set trainer.eval_strategy=steps or epoch."] if named else [])
    data, split = t.eval_dataset_name or t.dataset_name, t.dataset_test_split
    if data == "tiny" and split not in TINY_SPLITS:
        problems.append(f"trainer.dataset_test_split={split}: the built-in tiny dataset has the splits "
                        f"{' and '.join(TINY_SPLITS)}. Use trainer.dataset_test_split=test, or "
                        f"trainer.eval_dataset_name=<a .jsonl file>.")
    elif t.eval_dataset_name is None and data.endswith(LOCAL_DATA_SUFFIXES):
        problems.append(f"trainer.eval_strategy={value(t.eval_strategy)} needs evaluation data, and "
                        f"trainer.dataset_name={data} is one file (one split). Set trainer.eval_dataset_name="
                        f"<held-out file>.")
    return problems


def check_eval_here(cfg) -> List[str]:
    """The evaluation file or folder exists here, and a folder holds the split's file."""
    t = cfg.trainer
    if value(t.eval_strategy) == "no":
        return []
    name = t.eval_dataset_name
    if name and name != "tiny" and is_local_path(name) and not os.path.exists(os.path.expanduser(name)):
        return [f"trainer.eval_dataset_name={name} does not exist. Give an existing .jsonl/.json/.parquet file, a "
                f"hub dataset name, or trainer.eval_dataset_name=tiny."]
    folder = os.path.expanduser(name or t.dataset_name)
    if os.path.isdir(folder) and not any(named_for_split(f, t.dataset_test_split) for f in os.listdir(folder)):
        return [f"trainer.dataset_test_split={t.dataset_test_split}: {name or t.dataset_name} has no file for that "
                f"split (datasets names splits by file: {t.dataset_test_split}.jsonl). Set "
                f"trainer.dataset_test_split to one of its files' names, or trainer.eval_dataset_name=<file>."]
    return []


def check_generation_batch(cfg, batch: Batch) -> List[str]:
    """GRPO and RLOO score whole groups of num_generations completions: the global batch must hold whole groups."""
    n, name = cfg.trainer.num_generations, value(cfg.trainer.name)
    if name not in GENERATING or n < 2 or batch.global_size % n == 0:
        return []
    return [f"trainer={name}: the global batch {batch.global_size} is not a multiple of trainer.num_generations={n}. "
            f"Set trainer.num_generations to a divisor of {batch.global_size}, or "
            f"batch.global_size={math.lcm(batch.micro * batch.world, n)}."]


def check_kto_batch(cfg, batch: Batch) -> List[str]:
    """KTO's KL term pairs each prompt with another completion of its micro-batch: one example has none."""
    args = cfg.trainer.args or {}
    if value(cfg.trainer.name) != "kto" or batch.micro > 1 or args.get("loss_type", "kto") == KTO_NO_KL:
        return []
    return [f"trainer.per_device_train_batch_size={batch.micro} with trainer=kto: KTO estimates its KL term from the "
            f"other completions of a micro-batch, so it needs 2 or more. Set trainer.per_device_train_batch_size=2, or "
            f"+trainer.args.loss_type={KTO_NO_KL} (no KL term)."]


def check_peft(cfg) -> List[str]:
    p = cfg.peft
    if value(p.name) == "none":
        return []
    problems = [f"peft.r={p.r} must be at least 1."] if p.r < 1 else []
    problems += [f"peft.lora_alpha={p.lora_alpha} must be positive."] if p.lora_alpha <= 0 else []
    problems += [f"peft.lora_dropout={p.lora_dropout} must be in [0, 1)."] if not 0 <= p.lora_dropout < 1 else []
    from trl_ds.check.lora_targets import target_problems  # the model's own modules (BLOOM's, GPT-2's Conv1D)

    return problems + target_problems(cfg)


def check_sequence_parallel(cfg) -> List[str]:
    s, size, name = cfg.sp, cfg.sp.size, value(cfg.sp.name)
    if name == "none":
        return [] if size == 1 else [f"sp.size={size} has no effect with sp=none. Use sp=ulysses sp.size={size}."]
    if size < 2:
        return [f"sp=ulysses needs sp.size of 2 or more (got sp.size={size}). Set sp.size=2, or sp=none."]
    problems = []
    world = world_size(cfg)
    if world % size:
        sizes = [str(n) for n in range(2, world + 1) if world % n == 0]
        fix = f"sp.size={' or '.join(sizes)}" if sizes else "a cluster of 2 or more ranks, or sp=none"
        problems.append(f"sp.size={size} must divide the world size {world} (cluster={cfg.cluster.name}). Use {fix}.")
    if value(cfg.trainer.name) != "sft":
        problems.append(f"sp=ulysses works with trainer=sft only: TRL's {value(cfg.trainer.name)} trainer does not "
                        f"shard sequences. Use trainer=sft, or sp=none.")
    problems += _heads_divide(cfg.model, size)
    if cfg.trainer.max_length % size and value(cfg.cluster.device) == "cpu":
        problems.append(f"trainer.max_length={cfg.trainer.max_length} must be a multiple of sp.size={size}: on CPU "
                        f"every batch is padded to it (gloo gathers equal shapes only) and split in {size}. Set "
                        f"trainer.max_length={(cfg.trainer.max_length // size + 1) * size}.")
    if s.attn_implementation not in SP_ATTENTION:
        problems.append(f"sp.attn_implementation={s.attn_implementation} does not work with Ulysses (it needs "
                        f"attention that takes position_ids). Use sp.attn_implementation=sdpa.")
    elif s.attn_implementation != "sdpa" and value(cfg.cluster.device) == "cpu":
        problems.append(f"sp.attn_implementation={s.attn_implementation} needs GPUs (cluster.device=cpu here). "
                        f"Use sp.attn_implementation=sdpa.")
    return problems


def _heads_divide(model, size: int) -> List[str]:
    heads, kv = model.num_attention_heads, model.num_key_value_heads
    if heads % size == 0 and (kv % size == 0 or size % kv == 0):
        return []
    return [f"sp.size={size} must divide model.num_attention_heads={heads}, and divide or be a multiple of "
            f"model.num_key_value_heads={kv} (Ulysses gives each rank whole heads). Use a smaller sp.size."]


def check_trainer_here(cfg) -> List[str]:
    """What this machine must have for a real launch: evaluation data, reward functions, loggers."""
    problems = check_eval_here(cfg)
    if value(cfg.trainer.name) in GENERATING:
        problems += [p for path in cfg.trainer.reward_funcs for p in [reward_function_problem(path)] if p]
    for name in report_to_names(cfg.trainer.report_to):
        if name in LOGGER_PACKAGES and not any(importlib.util.find_spec(m) for m in LOGGER_PACKAGES[name]):
            problems.append(f"trainer.report_to={name} needs the {LOGGER_PACKAGES[name][0]} package, which is not "
                            f"installed here. Install it (pip install {LOGGER_PACKAGES[name][0]}) or drop {name} from "
                            f"trainer.report_to.")
    return problems


def report_to_names(report_to) -> List[str]:
    """trainer.report_to as a list of names: transformers takes one name or a list of them."""
    if isinstance(report_to, (list, ListConfig)):
        return [str(value(n)) for n in report_to]
    return [str(value(report_to))]


def _report_to_problems(report_to) -> List[str]:
    known = report_to_choices()
    unknown = [n for n in report_to_names(report_to) if n not in known]
    if not unknown:
        return []
    return [f"trainer.report_to={_show(report_to)}: transformers knows no integration {', '.join(unknown)}. Use one "
            f"or a list of: {', '.join(known)}."]


def reward_function_problem(path: str) -> Optional[str]:
    """Import pkg.module.fn the way TRL's `trl grpo` and `trl rloo` do; None when it is a callable."""
    module_name, _, attr = path.rpartition(".")
    fix = f"Give module.function importable from this folder, e.g. trainer.reward_funcs=[{BUILTIN_REWARD}]."
    if not module_name:
        return f"trainer.reward_funcs: {path} is not a dotted path. {fix}"
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any import-time failure of user code is the user's to fix
        return f"trainer.reward_funcs: {path} does not import ({type(err).__name__}: {err}). {fix}"
    if not callable(getattr(module, attr, None)):
        return f"trainer.reward_funcs: module {module_name} has no function {attr}. {fix}"
    return None


def _plain(x):
    return list(x) if isinstance(x, ListConfig) else x


def _show(x) -> str:
    return f"[{','.join(map(str, x))}]" if not isinstance(x, str) and hasattr(x, "__iter__") else str(x)
