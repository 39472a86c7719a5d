"""TRL's and transformers' own arguments (trainer.args.NAME), checked before launch against the classes that
`trl <cmd> --config` parses, read from the installed sources with `ast` (importing trl imports torch).
"""
import ast
import difflib
import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from trl_ds.check.imported import show
from trl_ds.config.quantization import MODEL_CONFIG_FIELDS
from trl_ds.config.values import value

# Each trainer's parser, as trl/scripts/<cmd>.py make_parser builds it (DatasetMixtureConfig is left out: trl_ds
# loads the data itself).
PREFIX = {"sft": "SFT", "dpo": "DPO", "reward": "Reward", "grpo": "GRPO", "kto": "KTO", "rloo": "RLOO"}
OWN_SCRIPT_ARGUMENTS = ("grpo", "rloo")  # trl/scripts/<cmd>.py declares <Prefix>ScriptArguments
PARSER_CLASSES = {t: (f"{p}ScriptArguments" if t in OWN_SCRIPT_ARGUMENTS else "ScriptArguments", f"{p}Config",
                      "ModelConfig") for t, p in PREFIX.items()}
CLASS_FILES = {"TrainingArguments": ("transformers", "training_args.py"),
               "_BaseConfig": ("trl", "trainer/base_config.py"), "ModelConfig": ("trl", "trainer/model_config.py"),
               "ScriptArguments": ("trl", "scripts/utils.py"),
               **{f"{p}Config": ("trl", f"trainer/{t}_config.py") for t, p in PREFIX.items()},
               **{f"{PREFIX[t]}ScriptArguments": ("trl", f"scripts/{t}.py") for t in OWN_SCRIPT_ARGUMENTS}}
PLAIN_TYPES = {"bool": (bool,), "int": (int,), "float": (float, int), "str": (str,), "dict": (dict,),
               "list": (list,), "None": (type(None),)}

# Arguments trl_ds sets from its own keys, {value} standing for the value given (the trainer group's own fields
# are refused as trainer.NAME).
OWNED = {
    "output_dir": "hydra.run.dir (the run dir holds the checkpoints)",
    "seed": "seed={value}",
    "gradient_accumulation_steps": "trainer.gradient_accumulation_steps={value} or batch.global_size",
    "auto_find_batch_size": "trainer.per_device_train_batch_size=auto",
    "bf16": "precision=bf16", "fp16": "precision=fp16", "tf32": "precision", "dtype": "precision",
    "bf16_full_eval": "precision", "fp16_full_eval": "precision", "half_precision_backend": "precision",
    "deepspeed": "zero=stage0..3 and offload=none|cpu|nvme (trl_ds writes ds_config.json)",
    "fsdp": "zero=stage3 (trl_ds trains with DeepSpeed)", "fsdp_config": "zero=stage3 (trl_ds trains with DeepSpeed)",
    "optim": "the DeepSpeed optimizer in ds_config.json (AdamW; trainer.learning_rate, adam_beta1/2, weight_decay)",
    "optim_args": "the DeepSpeed optimizer in ds_config.json",
    "save_strategy": "checkpoint.every_steps", "save_steps": "checkpoint.every_steps={value}",
    "save_total_limit": "checkpoint.keep_last={value} (trl_ds rotates only complete checkpoints)",
    "resume_from_checkpoint": "resume=auto", "accelerator_config": "cluster and launcher (trl_ds starts the ranks)",
    "parallelism_config": "sp=ulysses", "use_cpu": "cluster.device", "local_rank": "launcher",
    "ddp_backend": "launcher (gloo on CPU, nccl on GPUs)",
    "activation_checkpointing": "trainer.gradient_checkpointing",
    "model_name_or_path": "model.name_or_path={value}", "dataset_name": "trainer.dataset_name={value}",
    "use_peft": "peft=lora", "lora_r": "peft.r={value}", "lora_alpha": "peft.lora_alpha={value}",
    "lora_dropout": "peft.lora_dropout={value}",
    "lora_target_modules": "peft.target_modules={value}", "lora_task_type": "peft=lora (set by the trainer)",
    "lora_modules_to_save": "peft=lora (set by the trainer)",
}

# ModelConfig: trl_ds's worker builds the model itself (worker/trainers.py load_model), so each field is applied there,
# applied by TRL's get_peft_config (peft=lora only), owned above, or mapped onto peft.* below.
# tests/unit/check/test_model_arguments.py fails when TRL adds a field that is in none of them.
APPLIED_BY_WORKER = {"attn_implementation": "attn_implementation", "model_revision": "revision"}  # -> from_pretrained
PEFT_ONLY = ("use_rslora", "use_dora", "lora_target_parameters")  # read by trl.get_peft_config when use_peft
# bitsandbytes' quantization: moved onto peft.* before the checks (config/quantization.py map_model_config_fields);
# one that reaches the checks unmoved (an entry point that does not map) is refused naming its peft key.
MAPPED = MODEL_CONFIG_FIELDS


@dataclass(frozen=True)
class Argument:
    owner: str  # the class that declares it
    annotation: str  # its type as written in the source


@functools.lru_cache(maxsize=None)
def class_fields(name: str) -> Dict[str, Argument]:
    """The init fields of one config class and its bases, base first (a subclass redefines a field)."""
    package, path = CLASS_FILES[name]
    spec = importlib.util.find_spec(package)  # a top-level package: found without running it
    with open(os.path.join(spec.submodule_search_locations[0], path)) as f:
        tree = ast.parse(f.read())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    fields: Dict[str, Argument] = {}
    for base in node.bases:
        fields.update(class_fields(ast.unparse(base)))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and not _no_init(stmt.value):
            fields[stmt.target.id] = Argument(name, ast.unparse(stmt.annotation))
    return fields


def _no_init(value: Optional[ast.expr]) -> bool:
    return isinstance(value, ast.Call) and any(k.arg == "init" and isinstance(k.value, ast.Constant)
                                               and k.value.value is False for k in value.keywords)


def trainer_fields(trainer: str) -> Dict[str, Argument]:
    fields: Dict[str, Argument] = {}
    for name in PARSER_CLASSES[trainer]:
        fields.update(class_fields(name))
    return fields


def type_problem(value: Any, annotation: str) -> Optional[str]:
    """None when value fits the annotation; otherwise the types it accepts, in words."""
    accepted, literals = _accepted(ast.parse(annotation, mode="eval").body)
    if accepted is None:  # an annotation naming a class of its own (an enum, a config object): not checked here
        return None
    if any(isinstance(value, t) and not (isinstance(value, bool) and bool not in t) for t in accepted.values()):
        return None
    if literals and value in literals:
        return None
    return " or ".join(list(accepted) + [repr(v) for v in literals])


def _accepted(node: ast.expr) -> Tuple[Optional[Dict[str, tuple]], list]:
    """({type name: python types}, literal values) that an annotation admits; None for types not checked."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [_accepted(node.left), _accepted(node.right)]
    elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Optional", "Union"):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        parts = [_accepted(n) for n in items] + ([({"None": PLAIN_TYPES["None"]}, [])]
                                                 if ast.unparse(node.value) == "Optional" else [])
    elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Literal":
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return {}, [n.value for n in items]
    else:
        name = ast.unparse(node.value if isinstance(node, ast.Subscript) else node)
        name = {"Dict": "dict", "List": "list"}.get(name, name)
        return ({name: PLAIN_TYPES[name]}, []) if name in PLAIN_TYPES else (None, [])
    if any(accepted is None for accepted, _ in parts):
        return None, []
    return {k: v for accepted, _ in parts for k, v in accepted.items()}, [v for _, lits in parts for v in lits]


def check_arguments(trainer: str, args: Dict[str, Any], trainer_keys, where: str = "trainer.args") -> List[str]:
    """Every problem with args at once: unknown names (with the closest real ones), arguments trl_ds owns, types."""
    if not args:
        return []
    fields = trainer_fields(trainer)
    parser = "/".join(PARSER_CLASSES[trainer])
    problems = []
    for name, given in args.items():
        shown = f"{where}.{name}={show(given)}"
        if name in trainer_keys:
            problems.append(f"{shown}: trl_ds sets {name} from trainer.{name}. Use trainer.{name}={show(given)} "
                            f"instead.")
        elif name in OWNED:
            use = OWNED[name].format(value=show(given))
            problems.append(f"{shown}: trl_ds sets {name} itself. Use {use} instead.")
        elif name in MAPPED:
            problems.append(f"{shown}: trl_ds reads it as peft.{MAPPED[name]}. Use peft.{MAPPED[name]}="
                            f"{show(given)} instead (with peft=lora or peft=qlora).")
        elif name not in fields:
            problems.append(f"{shown}: trainer={trainer} has no argument {name} (checked against {parser})."
                            + _elsewhere(trainer, name) + _closest(name, fields))
        else:
            wanted = type_problem(given, fields[name].annotation)
            if wanted:
                problems.append(f"{shown} must be {wanted} ({fields[name].owner}.{name}: "
                                f"{fields[name].annotation}).")
    return problems


def _elsewhere(trainer: str, name: str) -> str:
    others = [t for t in PARSER_CLASSES if t != trainer and name in trainer_fields(t)]
    return f" It is an argument of trainer={'/'.join(others)}." if others else ""


def _closest(name: str, fields) -> str:
    close = difflib.get_close_matches(name, list(fields), n=3, cutoff=0.6)
    return f" Closest: {', '.join(close)}." if close else ""


def check_model_arguments(cfg) -> List[str]:
    """ModelConfig's LoRA options that only TRL's get_peft_config reads: with peft=none nothing would."""
    args = cfg.trainer.args or {}
    peft = value(cfg.peft.name)
    return [f"trainer.args.{name}={show(args[name])} shapes the LoRA adapters, and peft=none here: nothing would "
            f"read it. Add peft=lora, or remove it." for name in PEFT_ONLY if name in args and peft == "none"]
