"""trl_ds/plan/precision_bytes.py against DeepSpeed itself: its CPU Adam's and torch's optimizer state dtypes, its
own memory estimator's bytes per parameter, and its ZeRO-3 partial offload rule."""
import pytest

from trl_ds.plan.precision_bytes import even_offload_split, offload_split, optimizer_bytes


def state_bytes_per_param(optimizer, param) -> int:
    states = [v for v in optimizer.state[param].values() if hasattr(v, "element_size") and v.numel() == param.numel()]
    return sum(v.numel() * v.element_size() for v in states) // param.numel()


def stepped(make, dtype):
    import torch

    param = torch.nn.Parameter(torch.zeros(64, dtype=dtype))
    param.grad = torch.ones_like(param)
    optimizer = make([param])
    optimizer.step()
    return optimizer, param


# DeepSpeed's CPU Adam (its JIT-built cpu_adam op): tests/integration/test_precision_bytes_cpu_adam.py


@pytest.mark.parametrize("bf16_master", [False, True])
def test_device_moments_follow_the_master_weights(bf16_master):
    """On the device the optimizer steps the master weights and allocates its moments like them."""
    import torch

    master = torch.bfloat16 if bf16_master else torch.float32
    optimizer, param = stepped(lambda ps: torch.optim.AdamW(ps), master)
    expected = state_bytes_per_param(optimizer, param)
    assert optimizer_bytes(bf16_master, bf16_master, offloaded=False).moments == expected
    assert optimizer_bytes(bf16_master, bf16_master).master == param.element_size()


def test_default_bytes_are_deepspeeds_estimator_terms():
    """DeepSpeed's own ZeRO-2 estimator: 16 B per parameter offloaded (its cpu_mem), and on the device 18 B over
    the data-parallel ranks, of which 2 B are the 16-bit gradients (its comment): 16 B for the optimizer side."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    params, gpus = 1_000_000, 4
    cpu, _ = estimate_zero2_model_states_mem_needs(params, gpus, 1, cpu_offload=True, additional_buffer_factor=1)
    _, gpu = estimate_zero2_model_states_mem_needs(params, gpus, 1, cpu_offload=False)
    offloaded, on_device = optimizer_bytes(offloaded=True), optimizer_bytes()
    assert (offloaded.states + offloaded.master_grads) * params == cpu
    assert (on_device.states + on_device.master_grads) * params // gpus == gpu - 2 * params - 2 * params // gpus
    assert (on_device.states, on_device.master_grads) == (12, 4)


def test_bf16_options_halve_what_they_name():
    assert optimizer_bytes(True, False, offloaded=True) == optimizer_bytes(False, False, True).__class__(2, 8, 2)
    for offloaded in (True, False):  # 2 master + 4 moments + 2 gradients
        assert optimizer_bytes(True, True, offloaded) == optimizer_bytes().__class__(2, 4, 2)


def test_offload_split_moves_whole_sub_groups():
    # stage3.py: sub-group i goes to the CPU when i >= int((1 - ratio) * n); n = 5, ratio 0.5: int(2.5) = 2 stay
    assert offload_split([10, 20, 30, 40, 50], 0.5) == (30, 120)
    assert offload_split([10, 20, 30, 40, 50], 1.0) == (0, 150)
    assert offload_split([10, 20, 30, 40, 50], 0.0) == (150, 0)
    assert offload_split([100], 0.3) == (0, 100)  # one sub-group: int(0.7) = 0, all of it offloaded
    assert even_offload_split(1000, 100, 0.25) == (700, 300)  # ten sub-groups, int(7.5) = 7 stay
    assert even_offload_split(1000, 10_000, 0.25) == (0, 1000)
