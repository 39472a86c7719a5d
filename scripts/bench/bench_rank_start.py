"""Time what a rank imports before it trains, with nothing kept out and with trl_ds/worker/unused_packages.py's
keep-outs (bitsandbytes, DeepSpeed's Muon module).

    .venv/bin/python scripts/bench/bench_rank_start.py            # 5 of each, alternating
    .venv/bin/python scripts/bench/bench_rank_start.py --n 9

Each sample is a fresh interpreter importing the worker's own module (trl_ds.worker.train, which imports
transformers, peft, trl and DeepSpeed's pieces), DeepSpeed's engine and the Muon module the engine imports at its start,
with a run dir's config.yaml of peft=none and ds_config.json of AdamW; the three sides differ only in which
keep-outs ran. Prints the median and spread of wall and user+system CPU seconds per side.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

IMPORT = "import trl_ds.worker.train, deepspeed.runtime.engine, deepspeed.runtime.zero.muon.muon_optimizer"
BNB_ONLY = "import sys; sys.modules['bitsandbytes'] = None; "  # the first keep-out alone
KEEP_OUT = "from trl_ds.worker.unused_packages import keep_out_unused_packages; keep_out_unused_packages({run!r}); "


def sample(code: str) -> tuple:
    start, before = time.perf_counter(), os.times()
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return time.perf_counter() - start, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run:
        Path(run, "config.yaml").write_text("peft:\n  name: none\n  load_in_4bit: false\n  load_in_8bit: false\n")
        Path(run, "ds_config.json").write_text('{"optimizer": {"type": "AdamW"}}')
        sides = {"nothing kept out": IMPORT, "bitsandbytes kept out": BNB_ONLY + IMPORT,
                 "both kept out": KEEP_OUT.format(run=run) + IMPORT}
        times = {name: [] for name in sides}
        for _ in range(args.n):
            for name, code in sides.items():
                times[name].append(sample(code))
    for name, rows in times.items():
        wall, cpu = [r[0] for r in rows], [r[1] for r in rows]
        print(f"{name:22s} wall {statistics.median(wall):5.2f} s ({min(wall):.2f}-{max(wall):.2f}), "
              f"cpu {statistics.median(cpu):5.2f} s ({min(cpu):.2f}-{max(cpu):.2f}), n={len(rows)}")


if __name__ == "__main__":
    main()
