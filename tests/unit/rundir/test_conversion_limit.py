"""Resuming on another cluster shape converts the checkpoint first (rundir/universal.py): that wait has a limit and
ends with one line naming it, instead of holding the launch and every node waiting for it without end (#41)."""
import subprocess

import pytest

from trl_ds.cli.run import ready_resume
from trl_ds.rundir import universal
from trl_ds.rundir.checkpoint import mark_complete


def test_the_limit_grows_with_the_checkpoint(tmp_path):
    (tmp_path / "shard.pt").write_bytes(b"\0" * 2 ** 20)
    assert universal.convert_limit_s(str(tmp_path)) == int(600 + 120 / 1024)
    assert universal.convert_limit_s(str(tmp_path / "missing")) == 600


def test_a_conversion_past_its_limit_ends_the_launch_with_one_line(tmp_path, compose_cfg, monkeypatch, capsys):
    checkpoint = tmp_path / "trainer" / "checkpoint-3"
    (checkpoint / "global_step3").mkdir(parents=True)
    (checkpoint / "global_step3" / "mp_rank_00_model_states.pt").write_bytes(b"x")
    mark_complete(str(checkpoint), step=3, world_size=4, zero_stage=2)  # written by 4 ranks; this launch has 2
    monkeypatch.setattr(universal, "CONVERT_BASE_S", 0)  # the real converter, given no time at all
    with pytest.raises(SystemExit) as ended:
        ready_resume(compose_cfg([]), str(tmp_path))
    assert ended.value.code == 1
    assert capsys.readouterr().err == (
        f"trl_ds: launch failed: converting the newest checkpoint in {tmp_path}/trainer to DeepSpeed's universal "
        f"format did not finish within 0 s (deepspeed.checkpoint.ds_to_universal was ended); the checkpoints are "
        f"unchanged. Rerun to convert again, or resume on the shape that wrote it\n")
    assert sorted(p.name for p in checkpoint.iterdir()) == ["global_step3", "trl_ds_complete.json"]
    assert not subprocess.run(["pgrep", "-f", f"ds_to_universal.*{tmp_path.name}"], capture_output=True).stdout
