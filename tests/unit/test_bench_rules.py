"""scripts/bench.py's reporting rules: a ratio only where the two sides' spreads do not overlap, and the goals
checked on medians. The inputs are written here by hand."""
import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "scripts"))
import bench  # noqa: E402  (scripts/ is not a package)


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
