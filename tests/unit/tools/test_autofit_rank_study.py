"""scripts/study/autofit_rank_study.py's arithmetic (its measurements are not part of the suite), worked by hand."""
from scripts.study import autofit_rank_study as study


def test_summary_ranks_the_fastest_pass_of_each_point():
    # fastest passes: a 4, b 3, c 6 -> measured ranks 2, 1, 3 against estimated 1, 2, 3:
    # Spearman = 1 - 6 * (1 + 1 + 0) / (3 * (9 - 1)) = 0.5; the pick a is 4 / 3 - 1 slower than b
    result = study.summary(["a", "b", "c"], {"a": 1.0, "b": 2.0, "c": 3.0}, {"a": [5.0, 4.0], "b": [3.0], "c": [6.0]})
    assert result["pick"] == "a" and result["fastest_measured"] == "b"
    assert abs(result["spearman"] - 0.5) < 1e-12 and abs(result["pick_gap"] - 1 / 3) < 1e-12
