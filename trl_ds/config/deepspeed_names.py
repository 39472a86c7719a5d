"""DeepSpeed's own key names for the blocks trl_ds lets a user extend (zero_optimization, its offload blocks, zenflow,
bf16), read from the installed DeepSpeed's pydantic classes with `ast`: importing deepspeed imports torch, and a
misspelt key must be refused at once. A field counts by its name and by its alias; values are checked by the
classes themselves before launch (trl_ds/check/deepspeed_keys.py).
"""
import ast
import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import Dict, Optional

# block -> (file under deepspeed/, class)
CLASSES = {
    "zero_optimization": ("runtime/zero/config.py", "DeepSpeedZeroConfig"),
    "offload_optimizer": ("runtime/zero/offload_config.py", "DeepSpeedZeroOffloadOptimizerConfig"),
    "offload_param": ("runtime/zero/offload_config.py", "DeepSpeedZeroOffloadParamConfig"),
    "zenflow": ("runtime/zenflow/zenflow_config.py", "ZenFlowConfig"),
    "bf16": ("runtime/precision_config.py", "DeepSpeedBF16Config"),
}


@dataclass(frozen=True)
class DeepSpeedField:
    field: str  # the pydantic field behind the JSON name
    alias: Optional[str]  # the JSON name DeepSpeed documents when it differs (stage3_prefetch_bucket_size)
    replaced_by: Optional[str]  # a deprecated field: what DeepSpeed says to use instead


def deepspeed_root() -> str:
    spec = importlib.util.find_spec("deepspeed")  # a top-level package: found without running it
    return spec.submodule_search_locations[0]


@functools.lru_cache(maxsize=None)
def block_names(block: str) -> Dict[str, DeepSpeedField]:
    """Every name DeepSpeed accepts in one block, field names and aliases alike, -> its field."""
    path, name = CLASSES[block]
    with open(os.path.join(deepspeed_root(), path)) as f:
        tree = ast.parse(f.read())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    names: Dict[str, DeepSpeedField] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        keywords = {k.arg: k.value for k in stmt.value.keywords} if isinstance(stmt.value, ast.Call) else {}
        alias = _constant(keywords.get("alias"))
        entry = DeepSpeedField(stmt.target.id, alias, _replaced_by(keywords.get("json_schema_extra")))
        names[stmt.target.id] = entry
        if alias:
            names[alias] = entry
    return names


def _constant(node) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _replaced_by(extra) -> Optional[str]:
    """json_schema_extra={"deprecated": True, "new_param": "..."}: the replacement DeepSpeed names."""
    if not isinstance(extra, ast.Dict):
        return None
    items = {_constant(k): v for k, v in zip(extra.keys, extra.values)}
    deprecated = items.get("deprecated")
    if isinstance(deprecated, ast.Constant) and deprecated.value is True:
        return _constant(items.get("new_param")) or "its replacement"
    return None


def deepspeed_version() -> str:
    """The installed version, read from its git_version_info_installed.py (no import)."""
    try:
        with open(os.path.join(deepspeed_root(), "git_version_info_installed.py")) as f:
            tree = ast.parse(f.read())
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", "") == "version":
                return _constant(stmt.value) or "?"
    except OSError:
        pass
    return "?"


# The top-level names DeepSpeed's DeepSpeedConfig looks up (it ignores any other), recorded by
# check/deepspeed_verdict.py `judge`; tests/unit/check/test_deepspeed_keys.py fails when the installed DeepSpeed reads
# others. They let a misspelt deepspeed.NAME be refused without importing deepspeed, for this version only.
TOP_LEVEL_VERSION = "0.19.8"
TOP_LEVEL_NAMES = frozenset("""
activation_checkpointing aio amp autotuning bf16 checkpoint comet comms_logger communication_data_type compile
compression_training csv_monitor curriculum_learning data_efficiency data_types dataloader_drop_last datastates_ckpt
disable_allgather disable_python_gc dump_state eigenvalue elasticity expert_parallel flops_profiler fp16
gradient_accumulation_steps gradient_allreduce_op gradient_clipping gradient_predivide_factor graph_harvesting
hybrid_engine log_level managed_gradient_accumulation memory_breakdown nebula optimizer pipeline prescale_gradients
progressive_layer_drop quantize_training scheduler seq_parallel_communication_data_type sequence_parallel_size
sparse_attention sparse_gradients steps_per_print tensor_parallel tensorboard timers torch_autocast train_batch_size
train_micro_batch_size_per_gpu use_data_before_expert_parallelism vocabulary_size wall_clock_breakdown wandb
weight_quantization zero_allow_untested_optimizer zero_force_ds_cpu_optimizer zero_optimization
""".split())


def top_level_names() -> Optional[frozenset]:
    """TOP_LEVEL_NAMES when the installed DeepSpeed is the version they were recorded from; else None."""
    return TOP_LEVEL_NAMES if deepspeed_version() == TOP_LEVEL_VERSION else None
