"""What DeepSpeed AutoTP (tp=autotp) divides per rank: parameters (so their gradients and optimizer states), saved
activations, and the all-reduces it adds to every layer. Pure: an Architecture and a tp size in, numbers out.

AutoTP splits each decoder layer's q/k/v and gate/up by output features and o_proj/down_proj by input features (an
all-reduce after each); embeddings, norms and lm_head stay whole. Heads split by key-value groups and the MLP width
near-evenly, the first ranks taking one more (deepspeed/module_inject/tp_shard.py get_shard_size), so rank 0, the
largest, is the one planned: a model with rank 0's heads and MLP width (`local_architecture`).
"""
from dataclasses import replace

from trl_ds.plan.params import Architecture

# All-reduces per decoder layer and micro-step. Forward: the two row-parallel outputs (o_proj, down_proj). Backward:
# one per column-parallel Linear, for the gradient of its input (DeepSpeed's LinearLayer runs ColumnParallel per
# module, so q, k and v each all-reduce the same-shaped gradient). Each moves tokens × hidden values.
ROW_LINEARS = 2
COLUMN_LINEARS = {"phi3": 2}  # qkv_proj and gate_up_proj are fused; the other families have q, k, v, gate, up
COLUMN_LINEARS_DEFAULT = 5


def rank_share(total: int, tp: int, rank: int = 0) -> int:
    """Rank `rank`'s part of `total` items split near-evenly over tp ranks (the first ranks take the remainder)."""
    return total // tp + (1 if rank < total % tp else 0)


def local_architecture(arch: Architecture, tp: int) -> Architecture:
    """The model whose decoder layer is rank 0's layer under tensor parallelism of size tp."""
    if tp <= 1:
        return arch
    groups = rank_share(arch.num_key_value_heads, tp)  # key-value head groups; each keeps its query heads
    per_group = arch.num_attention_heads // arch.num_key_value_heads
    return replace(arch, num_attention_heads=groups * per_group, num_key_value_heads=groups,
                   intermediate_size=rank_share(arch.intermediate_size, tp))


def allreduces_per_layer(arch: Architecture, checkpointing: bool = False) -> int:
    """TP all-reduces per decoder layer per micro-step (forward, backward, and the recomputed forward)."""
    column = COLUMN_LINEARS.get(arch.model_type, COLUMN_LINEARS_DEFAULT)
    return ROW_LINEARS * (2 if checkpointing else 1) + column


def allreduce_bytes(arch: Architecture, tp: int, tokens: int, width: int, checkpointing: bool = False) -> int:
    """Bytes each rank sends per micro-step for TP's ring all-reduces of tokens × hidden."""
    if tp <= 1:
        return 0
    buffer = tokens * arch.hidden_size * width
    count = allreduces_per_layer(arch, checkpointing) * arch.num_hidden_layers
    return int(count * buffer * 2 * (tp - 1) / tp)


def allreduce_seconds(arch: Architecture, tp: int, tokens: int, width: int, checkpointing: bool, gbps: float,
                      latency_us: float) -> float:
    """Seconds of TP's all-reduces per micro-step: bytes over the group's bandwidth plus a latency per call. They sit
    on the critical path (each layer waits for its reduced output or input gradient), so nothing hides them."""
    if tp <= 1:
        return 0.0
    calls = allreduces_per_layer(arch, checkpointing) * arch.num_hidden_layers
    return allreduce_bytes(arch, tp, tokens, width, checkpointing) / (gbps * 1e9) + calls * latency_us * 1e-6
