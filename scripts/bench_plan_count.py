"""Time the first plan of a published config counted from its shape template against the same config counted on the
meta device: a fresh `python -m trl_ds.plan` process each, wall clock, alternating, N times each.

    nice -n 0 .venv/bin/python scripts/bench_plan_count.py --runs 5

The meta side is the same config.json with one key no template knows (the template steps aside), planned with an
empty count cache, so every run is a config's first plan, as it was for these families before the templates.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {  # the published config.json files' dimensions (all their layers)
    "microsoft/phi-2": {"model_type": "phi", "vocab_size": 51200, "hidden_size": 2560, "intermediate_size": 10240,
                        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                        "partial_rotary_factor": 0.4, "tie_word_embeddings": False},
    "bigscience/bloom-560m": {"model_type": "bloom", "vocab_size": 250880, "hidden_size": 1024, "n_layer": 24,
                              "n_head": 16},
    "CohereForAI/c4ai-command-r-v01": {"model_type": "cohere", "vocab_size": 256000, "hidden_size": 8192,
                                       "intermediate_size": 22528, "num_hidden_layers": 40,
                                       "num_attention_heads": 64, "num_key_value_heads": 64,
                                       "tie_word_embeddings": True},
    "bigcode/starcoderbase-1b": {"model_type": "gpt_bigcode", "vocab_size": 49152, "n_embd": 2048, "n_head": 16,
                                 "n_inner": 8192, "n_layer": 24, "n_positions": 8192, "multi_query": True},
}
PLAN = ("import sys, runpy; sys.argv = ['trl_ds.plan', sys.argv[1], 'cluster=1x1', '--json']\n"
        "try:\n    runpy.run_module('trl_ds.plan', run_name='__main__')\nexcept SystemExit:\n    pass\n")


def plan_once(folder: Path) -> tuple:
    """(wall seconds, the count method plan.json names) of one fresh plan with an empty count cache."""
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", PLAN, f"model.name_or_path={folder}"], cwd=REPO, check=True,
                             capture_output=True, text=True, env={**os.environ, "TRL_DS_CACHE": cache})
        wall = time.perf_counter() - started
    data = json.loads(out.stdout)
    return wall, data["architecture"]["count"], data["parameters"]


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for name, raw in CONFIGS.items():
            sides = {}
            for side, extra in (("template", {}), ("meta", {"x_a_key_no_template_knows": 1})):
                folder = Path(tmp) / name.replace("/", "_") / side
                folder.mkdir(parents=True)
                (folder / "config.json").write_text(json.dumps({**raw, **extra}))
                sides[side] = folder
            walls = {side: [] for side in sides}
            counted = {}
            plan_once(sides["template"])  # warm the file cache
            for _ in range(args.runs):
                for side, folder in sides.items():
                    wall, method, params = plan_once(folder)
                    walls[side].append(wall)
                    counted[side] = (method, params)
            assert counted["template"][1] == counted["meta"][1], counted
            row = ", ".join(f"{side} ({counted[side][0]}): median {statistics.median(w):.2f} s "
                            f"(min {min(w):.2f}, max {max(w):.2f})" for side, w in walls.items())
            print(f"{name}: {counted['template'][1]:,} parameters; {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
