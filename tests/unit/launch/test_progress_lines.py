"""Live progress, from a run's files: the arithmetic of rates and time left, partial lines, exit statuses, the
sweep's size, and launch.sh's OpenMP threads per rank."""
import io
import json
import os
import subprocess

from trl_ds.cli.sweep_lines import sweep_size
from trl_ds.cli.watch import exit_status
from trl_ds.launch.progress import Display, MetricsTail, Progress, clock, read_peaks, total_steps
from trl_ds.launch.script import omp_threads

ROWS = [  # as rank 0's MetricsLogger writes them: cumulative num_tokens, wall-clock time
    {"step": 1, "time": 100.0, "loss": 6.0, "learning_rate": 1e-3, "num_tokens": 60.0, "samples_per_second": 8.0,
     "epoch": 0.01},
    {"step": 2, "time": 102.0, "loss": 5.5, "learning_rate": 1e-3, "num_tokens": 130.0, "samples_per_second": 8.0,
     "epoch": 0.02},
    {"step": 4, "time": 106.0, "loss": 5.0, "learning_rate": 5e-4, "num_tokens": 260.0, "samples_per_second": 8.0,
     "epoch": 0.04},
    {"step": 4, "time": 106.5, "eval_loss": 5.25},
]


def test_rates_and_time_left_follow_the_logged_rows():
    p = Progress(total_steps=10, started=90.0)
    p.add(ROWS)
    # 3 steps in 6 s from the first row to the last: 2 s/step, 6 steps left -> 12 s; (260 - 60) tokens / 6 s
    assert p.step == 4 and p.loss == 5.0 and p.eval_loss == 5.25 and p.learning_rate == 5e-4
    assert p.seconds_left == 12.0
    assert abs(p.tokens_per_second - 200 / 6) < 1e-9
    p.peaks = {1: 300 * 2 ** 20, 0: 512 * 2 ** 20}
    assert p.line(now=106.0) == ("step 4/10 | epoch 0.04 | loss 5.0000 | eval loss 5.2500 | lr 5.00e-04 | "
                                 "8.0 samples/s | 33 tokens/s | 0:00:16 elapsed, 0:00:12 left | "
                                 "peak r0 512 MiB r1 300 MiB")


def test_without_max_steps_there_is_no_time_left_and_one_row_gives_no_rate():
    p = Progress(total_steps=None, started=100.0)
    p.add(ROWS[:1])
    assert p.seconds_left is None and p.tokens_per_second is None
    assert p.line(now=161.0) == "step 1 | epoch 0.01 | loss 6.0000 | lr 1.00e-03 | 8.0 samples/s | 0:01:01 elapsed"
    assert clock(3 * 3600 + 61) == "3:01:01"


def test_a_half_written_last_line_waits_for_its_end(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + '{"step": 2, "ti')
    tail = MetricsTail(str(path))
    assert [r["step"] for r in tail.read()] == [1]
    with open(path, "a") as f:
        f.write('me": 102.0, "loss": 5.5}\n')
    assert tail.read() == [{"step": 2, "time": 102.0, "loss": 5.5}]
    assert tail.read() == []
    resumed = MetricsTail(str(path))
    resumed.skip_existing()  # a relaunch shows its own rows, not the earlier launch's
    assert resumed.read() == []


def test_plain_lines_at_the_first_step_then_every_interval():
    out = io.StringIO()
    p = Progress(total_steps=10, started=0.0)
    display = Display(p, out, every_s=30)
    display.update(now=1.0)  # no step yet: nothing
    p.add(ROWS[:1])
    display.update(now=2.0)
    p.add(ROWS[1:2])
    display.update(now=20.0)  # within 30 s of the last line
    display.update(now=33.0)
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["trl_ds: step 1/10", "trl_ds: step 2/10"]


def test_total_steps_and_peaks_come_from_the_run_dir(tmp_path):
    (tmp_path / "config.yaml").write_text("trainer:\n  max_steps: 40\n  name: sft\n")
    (tmp_path / "progress").mkdir()
    (tmp_path / "progress" / "rank_1.json").write_text(json.dumps({"rank": 1, "peak_rss_bytes": 7}))
    (tmp_path / "progress" / "rank_0.json").write_text(json.dumps({"rank": 0, "peak_rss_bytes": 9,
                                                                    "gpu_peak_allocated_bytes": 5}))
    assert total_steps(str(tmp_path)) == 40
    assert read_peaks(str(tmp_path)) == {0: 5, 1: 7}  # a GPU's allocated peak where there is one
    (tmp_path / "config.yaml").write_text("trainer:\n  max_steps: -1\n")
    assert total_steps(str(tmp_path)) is None


def test_watch_exit_status_is_the_runs_own():
    assert exit_status({"status": "completed"}) == 0
    assert exit_status({"status": "failed", "exit_code": 7}) == 7
    assert exit_status({"status": "failed"}) == 1
    assert exit_status({"status": "stopped", "reason": "stopped by SIGINT"}) == 130
    assert exit_status({"status": "stopped", "reason": "stopped by SIGTERM"}) == 143
    assert exit_status({"status": "skipped"}) == 2


def test_sweep_size_is_the_product_of_the_swept_values():
    assert sweep_size(["zero=stage0,stage1,stage2", "offload=none,cpu", "trainer.max_steps=3"]) == 6
    assert sweep_size(["trainer.max_steps=3"]) == 1
    assert sweep_size(["seed=range(0,4)"]) == 4


def test_launch_sh_gives_each_rank_its_share_of_the_cores():
    cores = len(os.sched_getaffinity(0))  # what nproc prints
    for ranks in (1, 2, 64):
        script = "\n".join(omp_threads(ranks)) + "\necho $OMP_NUM_THREADS"
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        printed = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env).stdout
        assert int(printed) == max(cores // ranks, 1)
    kept = subprocess.run(["bash", "-c", "\n".join(omp_threads(2)) + "\necho $OMP_NUM_THREADS"],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "5"}).stdout
    assert int(kept) == 5  # a value the user set wins


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_an_evaluation_logged_after_its_steps_row_is_shown_on_the_terminal_and_in_the_last_plain_line():
    """transformers logs step 4's training row, then its evaluation: a poll between the two drew step 4 with the
    evaluation before it (5.25), and nothing redrew it."""
    later_eval = {"step": 6, "time": 110.5, "eval_loss": 4.75}
    train6 = {"step": 6, "time": 110.0, "loss": 4.5, "learning_rate": 5e-4, "num_tokens": 390.0}
    for stream in (Terminal(), io.StringIO()):
        p = Progress(total_steps=10, started=90.0)
        display = Display(p, stream, every_s=30)
        p.add(ROWS)
        display.update(now=107.0)
        p.add([train6])
        display.update(now=110.2)  # terminal: step 6 with the old evaluation; plain: within 30 s, nothing
        p.add([later_eval])
        display.update(now=110.6)
        display.close()
        last = stream.getvalue().replace("\x1b[K", "").replace("\r", "\n").strip().splitlines()[-1]
        assert last.startswith("trl_ds: step 6/10 | ") and "| eval loss 4.7500 |" in last, (type(stream), last)
