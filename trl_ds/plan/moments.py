"""Two device terms whose size is fixed by code outside trl_ds: the optimizer step's gradient copy, and a loss over
the whole logits. memory.py adds them to the resident model states (docs/memory-model.md lists every term's source).

A rank's peak of `torch.cuda.max_memory_allocated` falls at one of two moments of a step: the start of backward
(saved activations, the loss, gathered ZeRO-3 parameters) or the optimizer step (the gradient partition copied into
the master weights' dtype). Both hold the resident model states and buffers; memory.py takes the larger of the two.
"""
from trl_ds.plan.optimizer_places import split_elements
from trl_ds.plan.precision_bytes import optimizer_bytes

# A loss over the whole logits (b · s · V elements): the logits the model returns, in the training dtype, stay
# referenced by its output; transformers' ForCausalLMLoss (loss/loss_utils.py) upcasts them (`logits.float()`) and
# F.cross_entropy saves log_softmax's fp32 output for backward; in backward nll_loss's fp32 gradient and
# log_softmax_backward's fp32 result are alive beside that output: width + 4 + 4 + 4 bytes per logit. The forward's
# peak with transformers < 4.48 (an fp32 `shift_logits` copy beside the upcast) is the same 2 + 4 + 4 + 4.
FULL_LOSS_FP32_COPIES = 3


def full_logits_peak(tokens: int, vocab: int, width: int) -> int:
    """Peak of a model's own loss over the whole logits (no fused head): `tokens` tokens per rank."""
    return tokens * vocab * (width + 4 * FULL_LOSS_FP32_COPIES)


def step_transient(s) -> int:
    """Device bytes DeepSpeed allocates at the optimizer step beside the resident states, at their largest.

    Stages 1-2 (stage_1_and_2.py `step`): each param group's 16-bit gradient partition is flattened into a copy and
    cast to the master weights' dtype (`flatten(...).to(fp32)`): both copies are alive until `del
    flat_grad_partition`. Stage 3 (stage3.py `_prepare_fp32_grad_for_sub_group`): the same per sub-group of at most
    `sub_group_size` elements, released after that sub-group's step (`_release_sub_group`), so the largest sub-group
    counts. Casting to the same dtype (bf16_master_weights_and_grads) returns the copy itself. An offloaded optimizer
    takes its gradients on the host during backward: only the sub-groups on the device count."""
    if s.stage == 0:
        return 0
    on_device, _ = split_elements(s)
    elements = min(on_device, s.sub_group_size) if s.stage == 3 else on_device
    master = optimizer_bytes(s.bf16_master, s.bf16_states).master_grads
    width = s.train_width
    return int(elements * (width + (master if master != width else 0)))
