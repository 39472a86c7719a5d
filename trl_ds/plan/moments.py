"""Two device terms whose size is fixed by code outside trl_ds: the optimizer step's gradient copy, and a loss over
the whole logits (docs/memory-model.md lists every term's source). A rank peaks at the start of backward or at the
optimizer step (this gradient copy); memory.py takes the larger of the two.
"""
from trl_ds.plan.optimizer_places import split_elements
from trl_ds.plan.precision_bytes import optimizer_bytes

# A loss over the whole logits: the model's logits (training dtype), and, in fp32, ForCausalLMLoss's upcast,
# log_softmax's saved output and nll_loss's gradient in backward: width + 4 + 4 + 4 bytes per logit.
FULL_LOSS_FP32_COPIES = 3


def full_logits_peak(tokens: int, vocab: int, width: int) -> int:
    """Peak of a model's own loss over the whole logits (no fused head): `tokens` tokens per rank."""
    return tokens * vocab * (width + 4 * FULL_LOSS_FP32_COPIES)


def step_transient(s) -> int:
    """Device bytes DeepSpeed allocates at the optimizer step beside the resident states, at their largest.

    The 16-bit gradient partition flattened into a copy and cast to the master weights' dtype (stage 3: per
    sub-group, so the largest counts; the same dtype: no second copy). Offloaded sub-groups take theirs on the host."""
    if s.stage == 0:
        return 0
    on_device, _ = split_elements(s)
    elements = min(on_device, s.sub_group_size) if s.stage == 3 else on_device
    master = optimizer_bytes(s.bf16_master, s.bf16_states).master_grads
    width = s.train_width
    return int(elements * (width + (master if master != width else 0)))
