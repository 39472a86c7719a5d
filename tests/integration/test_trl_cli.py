"""TRL's own CLI on a finished run dir's exported files: `trl sft --config trainer.yaml` (launching with the
accelerate.yaml it names) trains the same run on 2 CPU ranks with DeepSpeed engaged, step for step."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import require
from tests.integration.test_multinode import losses, reference_run

pytestmark = pytest.mark.integration


def test_trl_sft_on_the_exported_files_trains_like_the_run(tmp_path_factory, tmp_path):
    reference = reference_run(tmp_path_factory)  # the shared 10-step run of the tiny model, 2 ranks, ZeRO-2
    run_dir = tmp_path_factory.getbasetemp() / "reference_run"
    bin_dir = os.path.dirname(sys.executable)
    require(os.path.exists(os.path.join(bin_dir, "trl")), "TRL's CLI (trl) is not installed beside this Python")
    out_dir = tmp_path / "trl_out"
    steps = len(reference["losses"])
    # From the run dir, as a user would; only where it saves moves (the run's own checkpoints stay untouched).
    cli = subprocess.run([os.path.join(bin_dir, "trl"), "sft", "--config", "trainer.yaml", "--output_dir",
                          str(out_dir), "--save_strategy", "steps", "--save_steps", str(steps)], cwd=run_dir,
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    # TRL's own CLI leaves gloo's threads to the interpreter's teardown, where a rank can still abort after the run
    # has trained and saved ("terminate called without an active exception", SIGABRT: one run in several here). Not
    # what this test checks, nor trl_ds's to fix (its own ranks skip that teardown: worker/script.py end_here); the
    # saved checkpoint below is checked either way.
    aborted_in_teardown = "terminate called without an active exception" in cli.stderr
    assert cli.returncode == 0 or aborted_in_teardown, cli.stderr[-3000:]
    checkpoint = out_dir / f"checkpoint-{steps}"
    # DeepSpeed ZeRO partitioned the optimizer over both ranks (accelerate counted 2 processes, not 1 each).
    shards = sorted(p.name for p in (checkpoint / f"global_step{steps}").glob("zero_pp_rank_*_optim_states.pt"))
    assert shards == ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    cli_losses = [row["loss"] for row in state["log_history"] if "loss" in row]
    assert cli_losses == losses(run_dir)  # the same computation, bit for bit: same data order, seed and DeepSpeed
