"""scripts/bench/bench.py's reporting rules: a ratio only where the two sides' spreads do not overlap, and the goals
checked on medians; --vs-accelerate's figures and its readings of each side's output. Inputs written by hand."""


from scripts.bench import bench, bench_accelerate


def spread(lo, median, hi, n=5):
    return {"min": lo, "median": median, "max": hi, "n": n}


def test_a_ratio_only_where_the_spreads_do_not_overlap():
    assert bench.compare(spread(0.4, 0.45, 0.5), spread(9.0, 10.8, 12.0), 0) == "24×"
    # 1.09x apart in the medians, but 80 +-5 and 73 +-6 overlap: the old report printed 1.090 here
    assert bench.compare(spread(75.0, 80.0, 85.0), spread(67.0, 73.4, 79.0), 3) == "no difference measured"
    assert bench.compare(spread(1.0, 1.0, 2.0), spread(2.0, 3.0, 4.0)) == "no difference measured"  # they touch


def test_goals_are_checked_on_medians():
    errors = [{"trl_ds_s": 0.45, "trl_ds_wall": spread(0.4, 0.45, 0.5), "baseline_s": 10.8,
               "baseline_caught": True},
              {"trl_ds_s": 0.5, "trl_ds_wall": spread(0.4, 0.5, 1.3), "baseline_s": None, "baseline_caught": False}]
    latency = {"trl_ds dry run": {"wall": spread(0.4, 0.47, 0.6)}, "deepspeed --help": {"wall": spread(2, 3, 4)},
               "trl_ds.plan": {"wall": spread(0.3, 0.33, 0.4)}}
    overhead = {"trl_ds_wall": spread(10, 12.2, 13), "baseline_wall": spread(10, 11.0, 12)}
    met = bench.goals_met({"errors": errors, "latency": latency, "overhead": overhead})
    assert met == {"config error < 1 s": True, "config error >= 10x sooner": True,  # 10.8 / 0.45 = 24
                   "dry run and planner < 1 s": True,  # deepspeed --help is not trl_ds's
                   "training wall <= 1.10x by hand": False}  # 12.2 / 11.0 = 1.109
    errors[0]["baseline_s"] = 4.0  # 4.0 / 0.45 = 8.9
    assert not bench.goals_met({"errors": errors, "latency": latency})["config error >= 10x sooner"]


# The end of a real `accelerate launch` whose two ranks failed (torchrun's summary, copied from a run's output), with
# the line argparse prints on each rank for a bad --learning_rate.
ACCELERATE_FAILURE = """\
bench_user_train.py: error: argument --learning_rate/--learning-rate: invalid float value: 'fast'
bench_user_train.py: error: argument --learning_rate/--learning-rate: invalid float value: 'fast'
E1206 00:03:45.627000 22048 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0 \
(pid: 22068) of binary: /work/main/.venv/bin/python
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
bench_user_train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-06_00:03:45
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 2 (pid: 22069)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-06_00:03:45
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 2 (pid: 22068)
============================================================
"""


def test_accelerates_side_gets_trl_ds_flags_without_deepspeed_and_its_own_output_dir():
    flags = ["--output_dir", "/run/trainer", "--seed", "42", "--deepspeed", "/run/ds_config.json", "--bf16", "false"]
    assert bench_accelerate.accelerate_flags(flags, "/out") == ["--output_dir", "/out", "--seed", "42", "--bf16",
                                                                "false"]


def test_step_figures_time_the_first_step_from_the_start_and_samples_over_steps_2_to_n():
    stamps = {"first_step_begin": 112.5, "step_ends": [113.0, 113.5, 114.0, 115.0], "samples_per_step": 4}
    # 3 steps after the first, 4 samples each, in 115.0 - 113.0 = 2 s
    assert bench_accelerate.step_figures(stamps, started=100.0) == {"first_step_s": 12.5, "samples_per_s": 6.0}


def test_what_each_side_answers_a_mistake_with():
    line = "bench_user_train.py: error: argument --learning_rate/--learning-rate: invalid float value: 'fast'"
    assert bench_accelerate.refusal(ACCELERATE_FAILURE) == line
    assert bench_accelerate.ranks_started(ACCELERATE_FAILURE) == 2
    assert bench_accelerate.last_exception(ACCELERATE_FAILURE) == \
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
    ours = "trl_ds: script=train.py: its parser refused the arguments it would get (...): " + line
    assert bench_accelerate.refusal("Loading...\n" + ours + "\n") == ours
    assert bench_accelerate.last_exception(ours) is None


def test_the_ratio_says_whether_it_is_within_the_noise():
    assert bench_accelerate.ratio_text(spread(9, 10, 12), spread(8, 8, 9.5)) == \
        "1.25 (spreads overlap: within the noise)"
    assert bench_accelerate.ratio_text(spread(30, 33, 40), spread(20, 22, 25)) == "1.50 (spreads apart)"
