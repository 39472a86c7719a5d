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


@pytest.mark.parametrize("target,message", [
    ("missing/plan.png", "--plot {d}/missing/plan.png: the folder {d}/missing does not exist; create it (mkdir -p "
                         "{d}/missing) or name a file in an existing folder."),
    ("plan.txt", "--plot {d}/plan.txt: matplotlib cannot write .txt files; name a .png, .svg or .pdf file (it writes "),
])
def test_a_target_it_cannot_write_is_one_line_before_the_table(tmp_path, capsys, target, message):
    """#61: the whole table, then a FileNotFoundError or matplotlib's ValueError traceback, exit 1."""
    assert main([*ARGS, "--plot", str(tmp_path / target)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1
    assert out.err.startswith("trl-ds plan: " + message.format(d=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_folder_gets_a_file_inside_named_in_the_output(tmp_path, capsys):
    """#61: --plot FOLDER wrote FOLDER.png beside it and said it wrote FOLDER."""
    folder = tmp_path / "plots"
    folder.mkdir()
    assert main(["--plot", str(folder), "--fits", *ARGS]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"trl-ds plan: wrote {folder}/plan.png (12 configurations)"
    assert (folder / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and sorted(tmp_path.iterdir()) == [folder]


def test_fits_when_nothing_fits_draws_nothing_and_says_so(tmp_path, capsys):
    """#61: --fits --plot drew every row that did not fit."""
    args = ["model=llama3-70b", "cluster=1x1", "cluster.gpu_memory_gb=8", "cluster.cpu_memory_gb=16"]
    assert main(["--fits", "--plot", str(tmp_path / "p.png"), *args]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"trl-ds plan: nothing fits, so --plot --fits drew nothing ({tmp_path}/p.png not " \
                                   f"written)."
    assert not (tmp_path / "p.png").exists()


def test_plot_and_need_in_any_order(tmp_path, capsys):
    """#61: `--plot f.png --need ...` reached Hydra as an override (LexerNoViableAltException: --plot). With --json,
    stdout stays one JSON document and the line about the file goes to stderr."""
    need = ["--gpus", "h100-80gb", "--counts", "1,8", "model=llama3-8b", "batch.global_size=8"]
    assert main(["--plot", str(tmp_path / "a.svg"), "--need", *need, "--json"]) == 0
    out = capsys.readouterr()
    shapes = json.loads(out.out)["fitting"]
    assert out.err == f"trl-ds plan: wrote {tmp_path}/a.svg ({len(shapes)} shapes)\n"
    assert main([*need, "--json", "--need", "--plot=" + str(tmp_path / "b.svg")]) == 0
    assert json.loads(capsys.readouterr().out)["fitting"] == shapes
    svg = (tmp_path / "a.svg").read_text()
    assert svg.startswith("<?xml") and all(f"{s['gpu']} x{s['gpus']}" in svg for s in shapes)


@pytest.mark.parametrize("args,message", [
    (["--plot"], "--plot needs a value, e.g. --plot plan.png."),
    (["--plot", "--need"], "--plot needs a value, e.g. --plot plan.png."),
    (["--counts", "1,8"], "--counts 1,8: --counts chooses --need's shapes; add --need, or drop --counts."),
    (["--fit"], "--fit: not a flag of trl-ds plan (its flags: --json, --fits, --need, --gpus, --counts, --plot, "
                "--tokens; see trl-ds plan --help)."),
])
def test_flag_mistakes_are_one_line(args, message, capsys):
    assert main([*ARGS, *args]) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"trl-ds plan: {message}\n")
