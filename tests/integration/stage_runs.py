"""One real 2-rank run per ZeRO stage × offload, made once per session and read by every test that only looks at
its outputs (test_training: it trains and the stages agree; test_memory_measured: the engine's bytes).

The tiny model at every stage and offload; the 12.3M one only at ZeRO-3, the one place where tensor size changes
what a rank holds (stage3_param_persistence_threshold). Below ZeRO-3 DeepSpeed and the estimate treat every tensor
alike, and the threshold's term and the optimizer offload's are apart (params on the device, gradients and optimizer
on the host), so a 12.3M run at stages 1-2 or with offload would measure nothing the tiny ones and larger-stage3
do not."""
import pytest
from conftest import run_app

STEPS = 6
# A CPU-sized Llama built in code (12.3M parameters): most tensors are above ZeRO-3's persistence threshold.
LARGER = ["model.hidden_size=512", "model.intermediate_size=1408", "model.num_attention_heads=8",
          "model.num_key_value_heads=4"]
CASES = {
    "stage0": ["zero=stage0"],
    "stage1": ["zero=stage1"],
    "stage2": ["zero=stage2"],
    "stage3": ["zero=stage3"],
    "stage1-cpu": ["zero=stage1", "offload=cpu"],
    "stage2-cpu": ["zero=stage2", "offload=cpu"],
    "stage3-cpu": ["zero=stage3", "offload=cpu"],
    "stage3-nvme": ["zero=stage3", "offload=nvme"],
    "larger-stage3": ["zero=stage3", *LARGER],
}
TINY = [name for name in CASES if not name.startswith("larger")]
_runs = {}


def stage_run(name, tmp_path_factory):
    """(run dir, CompletedProcess) of the case's run, trained on first use: `trainer.max_steps=6`, fp32, the final
    model saved."""
    if name not in _runs:
        run_dir = tmp_path_factory.mktemp(name) / "run"
        out = run_app([*CASES[name], f"trainer.max_steps={STEPS}"], run_dir)
        if out.returncode != 0:
            pytest.fail(f"{name} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        _runs[name] = (run_dir, out)
    return _runs[name]
