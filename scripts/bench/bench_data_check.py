"""Time the data-file check before launch (trl_ds/check/data_file.py) on a large JSONL, as a user meets it.

    .venv/bin/python scripts/bench/bench_data_check.py                 # 100 MB of short SFT rows and of ~1 KB rows
    .venv/bin/python scripts/bench/bench_data_check.py --mb 500 --keep /tmp/big.jsonl

Two numbers per file: the reader alone (in this process), and a whole `python -m trl_ds` launch that stops at a bad
line written last (so the reader goes through every good record first): exit 2, one line, nothing spawned.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from trl_ds.check.data_file import first_bad_record  # noqa: E402
from trl_ds.check.trainer_rules import NEEDED_COLUMNS  # noqa: E402
from trl_ds.worker.data import tiny_sft_examples  # noqa: E402


def write_jsonl(path: str, mb: int, row_bytes: int) -> int:
    """mb megabytes of {"text": ...} rows of about row_bytes each (the tiny data's sentences, repeated)."""
    sentences = [e["text"] for e in tiny_sft_examples(64)]
    rows = []
    for i, s in enumerate(sentences):
        text = s
        while len(text) < row_bytes - 12:
            text += " " + sentences[(i + len(text)) % len(sentences)]
        rows.append(json.dumps({"text": text[: row_bytes - 12]}) + "\n")
    block = "".join(rows)
    n = 0
    with open(path, "w") as f:
        while f.tell() < mb * 1_000_000:
            f.write(block)
            n += len(rows)
    return n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--row-bytes", default="80,1000", help="row sizes to try, comma-separated")
    parser.add_argument("--keep", default="", help="write the file here and keep it (one row size only)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for row_bytes in map(int, args.row_bytes.split(",")):
            path = args.keep or os.path.join(tmp, f"rows{row_bytes}.jsonl")
            rows = write_jsonl(path, args.mb, row_bytes)
            size = os.path.getsize(path) / 1e6
            started = time.perf_counter()
            assert first_bad_record(path, NEEDED_COLUMNS["sft"]) is None
            reader_s = time.perf_counter() - started
            with open(path, "a") as f:
                f.write('{"text": "the last line is cut\n')
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "trl_ds", f"trainer.dataset_name={path}",
                                   f"hydra.run.dir={tmp}/run{row_bytes}"], cwd=REPO, capture_output=True, text=True)
            launch_s = time.perf_counter() - started
            print(f"{size:.0f} MB, {rows} rows of ~{row_bytes} B: reader {reader_s:.2f} s "
                  f"({size / reader_s:.0f} MB/s); launch with a bad last line: exit {done.returncode} in "
                  f"{launch_s:.2f} s: {done.stderr.strip()[-300:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
