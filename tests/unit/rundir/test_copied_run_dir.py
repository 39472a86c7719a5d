"""A run dir copied elsewhere (cp -r) reports its own folder, not the original's (#41)."""
import json

from omegaconf import OmegaConf

from trl_ds.cli.watch import finished
from trl_ds.rundir.layout import adopt_summary, read_summary

LOG = "logs/node_0/r_x/attempt_0/1/stderr.log"


def failed_copy(tmp_path, compose_cfg):
    """The copy of a failed run whose original folder is gone: summary.json still names the original's paths."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    (copy / LOG).parent.mkdir(parents=True)
    (copy / LOG).write_text("Traceback (most recent call last):\nRuntimeError: rank 1's own error\n")
    (copy / "config.yaml").write_text(OmegaConf.to_yaml(compose_cfg([]), resolve=True))
    summary = {"status": "failed", "reason": "RuntimeError: rank 1's own error (launcher exited with code 1)",
               "log": f"{original}/{LOG}", "run_dir": str(original), "exit_code": 1}
    (copy / "summary.json").write_text(json.dumps(summary))
    return original, copy


def test_a_copys_summary_names_the_copy_and_its_logs(tmp_path, compose_cfg):
    original, copy = failed_copy(tmp_path, compose_cfg)
    assert read_summary(str(copy)) == {**json.loads((copy / "summary.json").read_text()), "run_dir": str(copy),
                                       "log": f"{copy}/{LOG}"}
    assert read_summary(str(tmp_path / "nowhere")) is None


def test_watch_of_a_copied_failed_run_shows_the_copys_log(tmp_path, compose_cfg, capsys):
    """Before: it named the original's log and read it (a FileNotFoundError, the original being gone)."""
    original, copy = failed_copy(tmp_path, compose_cfg)
    assert finished(str(copy)) == 1
    out = capsys.readouterr().out
    assert f"  first failing rank's log: {copy}/{LOG}\nTraceback (most recent call last):\n" \
           f"RuntimeError: rank 1's own error\n" in out
    assert f"  run dir: {copy}\n" in out and str(original) not in out


def test_a_launch_that_trains_nothing_in_a_copy_rewrites_its_summary(tmp_path, compose_cfg):
    original, copy = failed_copy(tmp_path, compose_cfg)
    adopt_summary(str(copy))
    saved = json.loads((copy / "summary.json").read_text())
    assert (saved["run_dir"], saved["log"]) == (str(copy), f"{copy}/{LOG}")
    before = (copy / "summary.json").stat().st_mtime_ns
    adopt_summary(str(copy))  # its own folder already: not written again
    assert (copy / "summary.json").stat().st_mtime_ns == before
