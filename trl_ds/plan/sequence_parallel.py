"""What Ulysses (sp=ulysses) adds to a step: the all-to-alls around each attention. Pure: sizes in, seconds out.

DeepSpeed's DistributedAttention turns q, k and v from a rank's tokens × all heads into all tokens × its heads and
the output back: four all-to-alls per layer in forward, four in backward, four more when checkpointing recomputes;
each rank sends (sp - 1) / sp of its buffer."""
from trl_ds.plan.params import Architecture

ALL_TO_ALLS = 4  # q, k, v and the attention output, per layer and pass


def all_to_all_bytes(arch: Architecture, sp: int, tokens: int, width: int, checkpointing: bool = False) -> int:
    """Bytes each rank sends per micro-step; `tokens` is the rank's share of the sequence."""
    if sp <= 1:
        return 0
    per_token = (2 * arch.num_attention_heads + 2 * arch.num_key_value_heads) * arch.head_dim * width
    passes = 3 if checkpointing else 2
    return int(passes * arch.num_hidden_layers * tokens * per_token * (sp - 1) / sp)


def all_to_all_seconds(arch: Architecture, sp: int, tokens: int, width: int, checkpointing: bool, gbps: float,
                       latency_us: float) -> float:
    """On the critical path like AutoTP's all-reduces: attention waits for its heads."""
    if sp <= 1:
        return 0.0
    calls = ALL_TO_ALLS * (3 if checkpointing else 2) * arch.num_hidden_layers
    return all_to_all_bytes(arch, sp, tokens, width, checkpointing) / (gbps * 1e9) + calls * latency_us * 1e-6
