"""`trl-ds plan --plot FILE`: the plan's per-rank memory stacked by component, the GPU line, host RAM per node and
the recommended configuration, drawn from a real plan; the bars read back from the figure equal plan --json's
numbers (a separate path through the planner: its rows as JSON)."""
import importlib.util
import json

import pytest

from trl_ds.cli import plan as plan_command
from trl_ds.cli.plan import main
from trl_ds.plan.memory import GiB
from trl_ds.plan.planner import by_time, recommend
from trl_ds.study.plan_plot import INSTALL, plot_rows

ARGS = ["model=llama3-8b", "cluster=1x8", "cluster.gpu_memory_gb=24", "batch.global_size=64",
        "trainer.max_length=2048"]


def test_the_plot_is_written_from_a_real_plan(tmp_path, capsys):
    path = tmp_path / "plan.png"
    assert main(["--plot", str(path), *ARGS, "--fits"]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"trl-ds plan: wrote {path} (12 configurations)"
    assert "recommended: zero=stage3" in out  # the plan's own text comes first, as without --plot


def test_the_bars_are_the_plan_numbers(tmp_path, capsys):
    assert main([*ARGS, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    fitting = [r for r in plan["rows"] if r["verdict"] == "fits"]
    cfg, rows, _, times = plan_command.plan(ARGS)
    rows = by_time(rows, times)
    drawn = plot_rows(cfg, rows, recommend(rows, times), str(tmp_path / "plan.png"), only_fitting=True)
    assert len(drawn["params"]) == len(fitting) == 12
    for i, row in enumerate(fitting):
        for part, heights in drawn.items():
            if part in row["device_bytes"]:
                assert heights[i] == pytest.approx(row["device_bytes"][part] / GiB)
        stacked = sum(drawn[p][i] for p in drawn if p in row["device_bytes"])
        assert stacked == pytest.approx(row["device_total_bytes"] / GiB)
        assert drawn["host"][i] == pytest.approx(row["host_total_bytes"] / GiB)
    rec = plan["recommendation"]
    marked = fitting[drawn["recommended"][0]]
    assert (marked["zero_stage"], marked["offload"], marked["micro_batch"], marked["gradient_checkpointing"]) == \
        (rec["zero_stage"], rec["offload"], rec["micro_batch"], rec["gradient_checkpointing"])


def test_without_matplotlib_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["--plot", str(tmp_path / "plan.png"), *ARGS]) == 2
    assert capsys.readouterr().err.strip() == INSTALL == ("trl-ds plan: --plot needs matplotlib, which is not "
                                                          "installed: pip install 'trl_ds[report]'")
    assert not (tmp_path / "plan.png").exists()
