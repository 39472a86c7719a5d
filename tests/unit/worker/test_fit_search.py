"""`trl-ds fit`'s search without a GPU: which micro-batches it tries, the answer it gives, the planner's side, and
the user mistakes it refuses. The search on a real engine is tests/integration/test_gpu_check_smoke.py."""
from dataclasses import replace

import pytest

from trl_ds.check.resolve import resolve
from trl_ds.cli import fit as fit_cli
from trl_ds.plan.memory import estimate, setup_from_config
from trl_ds.worker.fit import boundary, next_micro


def load(overrides):
    return setup_from_config(resolve(overrides).cfg)


def walk(start: int, limit: int, largest_that_fits: int):
    """The micro-batches tried, in order, on a GPU where exactly 1..largest_that_fits train."""
    trials, order = {}, []
    while (micro := next_micro(trials, start, limit)) is not None:
        order.append(micro)
        trials[micro] = micro <= largest_that_fits
    return order, boundary(trials, limit)


def test_from_the_planners_answer_it_doubles_until_out_of_memory_then_bisects():
    order, found = walk(start=4, limit=64, largest_that_fits=13)
    assert order == [4, 8, 16, 12, 14, 13]  # 16 ran out; between 8 and 16: 12 trains, 14 not, 13 trains
    assert found == {"measured_max_micro": 13, "bounded_by_limit": False, "smallest_oom_micro": 14}


def test_a_planner_answer_too_large_is_halved_until_one_trains():
    order, found = walk(start=16, limit=64, largest_that_fits=5)
    assert order == [16, 8, 4, 6, 5]
    assert found["measured_max_micro"] == 5 and found["smallest_oom_micro"] == 6


def test_the_planner_exactly_right_costs_two_trials_past_it():
    assert walk(start=6, limit=64, largest_that_fits=6)[0] == [6, 12, 9, 7]


def test_nothing_fits_and_the_limit_bounds_the_search():
    order, found = walk(start=2, limit=64, largest_that_fits=0)
    assert order == [2, 1] and found["measured_max_micro"] == 0 and found["smallest_oom_micro"] == 1
    order, found = walk(start=8, limit=20, largest_that_fits=1000)  # a CPU rank: nothing runs out within a cap
    assert order == [8, 16, 20] and found == {"measured_max_micro": 20, "bounded_by_limit": True,
                                              "smallest_oom_micro": None}


def test_the_planners_largest_fits_and_one_more_does_not():
    base = load(["model=llama3.2-1b", "cluster=1x1", "cluster.gpu_memory_gb=24", "precision=bf16",
                    "trainer.max_length=512", "zero=stage2", "offload=cpu"])
    planned = fit_cli.planner_max_micro(base, 4096)
    assert planned > 0
    assert estimate(replace(base, micro_batch=planned)).verdict == "fits"
    assert estimate(replace(base, micro_batch=planned + 1)).verdict != "fits"
    smaller = fit_cli.planner_max_micro(replace(base, gpu_memory_gb=16), 4096)
    assert 0 < smaller < planned  # 16 GiB holds fewer samples than 24


@pytest.mark.parametrize("args, message", [
    (["cluster=1x8"], "trl-ds fit measures one rank, but the cluster starts 8 (cluster=1x8). Use cluster=1x1 "
                      "(or cluster.gpus_per_node=1 cluster.nodes=1)."),
    (["cluster=1x1", "--steps", "0"], "trl-ds fit --steps=0: it must be at least 1."),
    (["cluster=1x1", "trainer=grpo"], "trl-ds fit searches trainer=sft or trainer=dpo, not trainer=grpo (its "
                                      "micro-batch is not a free size). Measure it with a run: python -m trl_ds "
                                      "trainer=grpo ..."),
])
def test_user_mistakes_are_one_line_and_exit_2(args, message, capsys, tmp_path):
    assert fit_cli.main([*args, "--run-dir", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == f"trl-ds fit: {message}\n"
    assert not (tmp_path / "r").exists()  # nothing written, nothing started


def test_the_summary_puts_the_reserved_peak_over_the_estimate_at_the_measured_size(tmp_path):
    from trl_ds.rundir.layout import read_json, write_json

    base = load(["model=qwen2.5-0.5b", "cluster=1x1", "cluster.gpu_memory_gb=24", "precision=bf16",
                    "trainer.max_length=512", "zero=stage2"])
    at_max = {"micro_batch": 12, "status": "trained", "peak_reserved_bytes": 20 * 2 ** 30, "confirm": True}
    write_json(str(tmp_path / "fit.json"), {
        "start": 9, "limit": 72, "steps": 3, "engine_builds": 1, "measured_max_micro": 12, "bounded_by_limit": False,
        "smallest_oom_micro": 13, "confirmed": True, "at_max": at_max,
        "trials": [{"micro_batch": 9, "status": "trained", "peak_reserved_bytes": 17 * 2 ** 30},
                   {"micro_batch": 18, "status": "oom", "peak_reserved_bytes": 24 * 2 ** 30}, at_max]})
    record = fit_cli.summarize({"run_dir": str(tmp_path), "base": base, "planner_max_micro": 9})
    estimated = estimate(replace(base, micro_batch=12)).device_total
    assert record["estimate_at_max_bytes"] == estimated
    assert record["reserved_over_estimate"] == round(20 * 2 ** 30 / estimated, 3)
    assert read_json(str(tmp_path / "fit.json")) == record  # kept in the run dir
    text = "\n".join(fit_cli.lines(record, str(tmp_path)))
    assert "  micro-batch   18: oom, peak reserved 24.00 GiB" in text
    assert ("trl-ds fit: largest micro-batch that trained 3 steps: 12; the planner's largest that fits: 9.\n"
            "  at 12: peak reserved 20.00 GiB = ") in text


@pytest.mark.no_gpu  # conftest.require_machine: skipped where a GPU is here
def test_docs_gpu_command_on_a_machine_without_a_gpu_is_refused_before_the_rank_spawns(tmp_path, capsys):
    """docs/gpu.md's command spawned a rank that ended in transformers' "Your setup doesn't support bf16/gpu" (#41)."""
    args = ["model=llama3.2-1b", "cluster=1x1", "cluster.gpu_memory_gb=24", "zero=stage2", "offload=cpu",
            "precision=bf16", "--run-dir", str(tmp_path / "fit")]
    assert fit_cli.main(args) == 2
    assert capsys.readouterr().err == (
        "trl-ds fit: cluster=1x1 asks for 1 GPUs per node (cluster.gpus_per_node=1) but this machine has 0. Use "
        "dry_run=true to write the run dir only, cluster.gpus_per_node=1 on a GPU machine, or cluster=local to train "
        "on CPU.\n")
    assert not (tmp_path / "fit").exists()  # nothing written, nothing spawned


def test_plan_json_of_a_fit_recommends_a_run_with_the_users_overrides(tmp_path):
    """plan.json's run command holds the command line's overrides, as `python -m trl_ds` writes it from Hydra's;
    `trl-ds fit` composes outside Hydra, and its own forced overrides are not the user's."""
    from trl_ds.rundir.layout import read_json

    user = ["cluster=local", "cluster.gpus_per_node=1", "trainer.max_length=48", "trainer.learning_rate=0.001"]
    job = fit_cli.prepare(fit_cli.parse([*user, "--run-dir", str(tmp_path / "fit")]))
    command = read_json(str(tmp_path / "fit" / "plan.json"))["recommendation"]["command"]
    assert command.startswith("python -m trl_ds " + " ".join(user) + " ")
    assert "gradient_accumulation_steps" not in command and job["run_dir"] == str(tmp_path / "fit")
