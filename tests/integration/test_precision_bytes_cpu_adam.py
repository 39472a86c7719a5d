"""The offloaded moments' bytes against DeepSpeed's CPU Adam itself: it loads the JIT-built cpu_adam op, so it runs
with the integration tests, after `make test` has built the ops. Moved from tests/unit/plan/test_precision_bytes.py."""
import pytest

from tests.unit.plan.test_precision_bytes import state_bytes_per_param, stepped
from trl_ds.plan.precision_bytes import optimizer_bytes

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("bf16_states", [False, True])
def test_offloaded_moments_are_what_deepspeeds_cpu_adam_keeps(bf16_states, monkeypatch):
    """engine.get_optimizer_configuration gives CPU Adam fp32_optimizer_states = not bf16_optimizer_states."""
    import torch

    from trl_ds.launch import spawn_env

    # the venv's ninja first, as for build-ops and the ranks: another ninja rebuilds the op from scratch (~45 s)
    monkeypatch.setenv("PATH", spawn_env()["PATH"])
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    optimizer, param = stepped(lambda ps: DeepSpeedCPUAdam(ps, fp32_optimizer_states=not bf16_states), torch.bfloat16)
    assert optimizer_bytes(True, bf16_states, offloaded=True).moments == state_bytes_per_param(optimizer, param)
