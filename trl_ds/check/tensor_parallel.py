"""tp=autotp (DeepSpeed AutoTP training), checked before launch: every combination DeepSpeed, transformers or
accelerate refuses at run time, or that trl_ds has not trained, is a problem here with its fix:
- ZeRO-3: transformers' ZeRO-3 load (`_apply_weight_conversions_to_state_dict`) raises NotImplementedError whenever
  tensor_parallel.autotp_size > 1.
- heads: AutoTP splits attention by key-value head groups (tp_shard.py get_shard_size); an uneven split leaves ranks
  waiting for the largest shard, and ranks beyond the kv head count hold no attention at all.
- families: only those with an AutoTP preset in trl_ds/config/topology.py (fused MoE experts, OLMo-2's q_norm and
  Phi-3's fused qkv match no spec).
- LoRA: PEFT wraps each target Linear (q_proj.base_layer), so the preset's patterns no longer match it.
- versions: accelerate refuses AutoTP below deepspeed 0.16.4; trl_ds's layout needs TPTrainingConfig.preset_model.
"""
import functools
import importlib.metadata
import importlib.util
import os
import re
from typing import List

from trl_ds.config.topology import AUTOTP_PRESETS, autotp_preset, model_type, topology
from trl_ds.config.values import elastic_min_nodes, value, world_size
from trl_ds.errors import ConfigError
from trl_ds.plan.params import architecture
from trl_ds.rundir.checkpoint import latest_complete, read_marker
from trl_ds.rundir.layout import CHECKPOINT_DIR
from trl_ds.rundir.universal import shape_change, sub_groups

MIN_DEEPSPEED = (0, 16, 4)
FAMILY_REASONS = {
    "phi3": "transformers' Phi3Attention slices its fused qkv_proj output at the whole model's heads × head_dim, "
            "which a rank's shard does not hold",
    "olmo2": "OLMo-2's q_norm and k_norm span all heads, so a rank's shard of q and k does not fit them",
}


def check_tensor_parallel(cfg) -> List[str]:
    name, size = value(cfg.tp.name), cfg.tp.size
    if name == "none":
        return [] if size == 1 else [f"tp.size={size} has no effect with tp=none. Use tp=autotp tp.size={size}."]
    if size < 1:
        return [f"tp.size={size} must be at least 1 (1: no layer is split). Set tp.size=2, or tp=none."]
    if size == 1:  # nothing is split: trained as tp=none (no tensor_parallel block), so a sweep over tp.size has it
        return []
    return (_world(cfg, size) + _model(cfg, size) + _combinations(cfg, size) + _versions())


def check_tensor_parallel_resume(cfg, run_dir: str) -> List[str]:
    """A run dir's tensor-parallel checkpoint resumes on the shape that wrote it. Another world or ZeRO stage would
    go through DeepSpeed's universal conversion (trl_ds/rundir/universal.py), which no AutoTP run here has tried; a
    change of tp itself is refused by the run dir's reuse check (tp.* is not a relaunch key)."""
    if topology(cfg).tp_size <= 1 or cfg.resume != "auto":
        return []
    chosen = latest_complete(os.path.join(run_dir, CHECKPOINT_DIR))
    change = shape_change(chosen, world_size(cfg), cfg.zero.stage, sub_groups(cfg)) if chosen else None
    if change is None:
        return []
    marker = read_marker(chosen)
    written = f"world size {marker['world_size']} and zero=stage{marker.get('zero_stage', cfg.zero.stage)}"
    return [f"tp=autotp: {chosen} was {change}; trl_ds has not converted a tensor-parallel checkpoint to another "
            f"shape. Relaunch it with {written} (the cluster and zero it was written with), or use a new "
            f"hydra.run.dir to start over."]


def _world(cfg, size: int) -> List[str]:
    world = topology(cfg).world
    if world % size == 0:
        return []
    sizes = [str(n) for n in range(2, world + 1) if world % n == 0]
    fix = f"tp.size={' or '.join(sizes)}" if sizes else "a cluster of 2 or more ranks, or tp=none"
    return [f"tp.size={size} must divide the world size {world} (cluster={cfg.cluster.name}). Use {fix}."]


def _model(cfg, size: int) -> List[str]:
    try:
        arch = architecture(cfg.model)
    except ConfigError:
        return []  # the model's own check reports it
    family = model_type(cfg.model)
    if autotp_preset(cfg.model) is None:
        why = ("transformers keeps each MoE block's experts as one fused 3D parameter, which AutoTP's nn.Linear specs "
               "do not match, so the experts would stay whole on every rank") if arch.num_experts else \
            FAMILY_REASONS.get(family, "it has no AutoTP layout here")
        return [f"tp=autotp cannot split model={cfg.model.name} (model_type {family}): {why}. Families split: "
                f"{', '.join(sorted(AUTOTP_PRESETS))}. Use tp=none (zero=stage3 shards every weight)."]
    heads, kv = arch.num_attention_heads, arch.num_key_value_heads
    problems = []
    if heads % size or kv % size:
        fits = [str(n) for n in range(2, kv + 1) if kv % n == 0 and heads % n == 0]
        fix = f"Use tp.size={' or '.join(fits)}." if fits else "No tp.size of 2 or more divides both: use tp=none."
        problems.append(f"tp.size={size} must divide model.num_attention_heads={heads} and num_key_value_heads={kv}: "
                        f"AutoTP splits attention by key-value head groups, so the ranks would hold unequal shards "
                        f"(none beyond {kv}). {fix}")
    return problems


def _combinations(cfg, size: int) -> List[str]:
    problems = []
    if cfg.zero.stage == 3:
        problems.append(f"tp=autotp does not load under zero=stage3: transformers raises NotImplementedError for a "
                        f"ZeRO-3 load with tensor_parallel.autotp_size={size} (integrations/deepspeed.py, "
                        f"_apply_weight_conversions_to_state_dict). Use zero=stage2 (it shards gradients and "
                        f"optimizer states over the data-parallel ranks), or tp=none.")
    if value(cfg.sp.name) != "none":
        problems.append("tp=autotp with sp=ulysses: trl_ds has not trained the two together (accelerate builds the "
                        "Ulysses groups, DeepSpeed the tensor-parallel ones, over the same ranks). Use one of them: "
                        "sp=none or tp=none.")
    peft = value(cfg.peft.name)
    if peft != "none":
        packed = (" (and AutoTP would slice bitsandbytes' packed 4-bit weights, stored as [numel/2, 1], by rows that "
                  "are not output features)") if cfg.peft.load_in_4bit else ""
        problems.append(f"tp=autotp with peft={peft}: PEFT wraps each target Linear (q_proj.base_layer), which "
                        f"AutoTP's layer patterns no longer match, so the layers would stay whole{packed}. Use "
                        f"peft=none or tp=none.")
    if value(cfg.trainer.name) != "sft":
        problems.append(f"tp=autotp is trained with trainer=sft only here; trainer={value(cfg.trainer.name)} under "
                        f"AutoTP is untested (a reference model, generation or a score head beside the split "
                        f"layers). Use trainer=sft, or tp=none.")
    if elastic_min_nodes(cfg) is not None:
        problems.append(f"tp=autotp with launcher.min_nodes={cfg.launcher.min_nodes}: an elastic launch changes the "
                        f"world, and a checkpoint split over tensor-parallel ranks is not converted. Drop "
                        f"launcher.min_nodes, or use tp=none.")
    return problems


@functools.lru_cache(maxsize=None)  # the installed DeepSpeed does not change in a process (the planner asks per row)
def _versions() -> List[str]:
    try:
        version = importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return []  # the launch checks report a missing DeepSpeed
    if _release(version) < MIN_DEEPSPEED:
        return [f"tp=autotp needs deepspeed>=0.16.4 (accelerate refuses AutoTP below it; installed {version}). "
                f"Run: pip install -U deepspeed."]
    if "preset_model" not in _tp_config_source():
        return [f"tp=autotp needs a DeepSpeed whose tensor_parallel config takes preset_model (installed {version} "
                f"does not). Run: pip install -U deepspeed."]
    return []


def _release(version: str) -> tuple:
    """(major, minor, patch) of '0.19.8+cu121' or '0.16.4rc1': each part's leading digits."""
    return tuple(int(re.match(r"\d*", piece).group() or 0) for piece in version.split("+")[0].split(".")[:3])


def _tp_config_source() -> str:
    """DeepSpeed's TPTrainingConfig source, read without importing DeepSpeed (seconds of start-up)."""
    spec = importlib.util.find_spec("deepspeed")
    path = os.path.join(list(spec.submodule_search_locations)[0], "runtime", "tensor_parallel", "config.py")
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""
