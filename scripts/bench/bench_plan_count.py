"""Time `trl-ds plan` in fresh processes (wall clock, medians of N): every shipped preset with an empty count cache
(their counts ship with trl_ds), and each config.json below twice, with an empty cache (its first plan: built on the
meta device, imports torch) and again with the cache that plan left (every later plan).

    nice -n 0 .venv/bin/python scripts/bench/bench_plan_count.py --runs 5
    nice -n 0 .venv/bin/python scripts/bench/bench_plan_count.py --runs 5 --only presets "Qwen/Qwen2.5-72B"
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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
    "ai21labs/AI21-Jamba-1.5-Mini": {"model_type": "jamba", "vocab_size": 65536, "hidden_size": 4096,
                                     "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                                     "num_key_value_heads": 8, "num_experts": 16, "num_experts_per_tok": 2,
                                     "attn_layer_offset": 4, "attn_layer_period": 8, "expert_layer_offset": 1,
                                     "expert_layer_period": 2, "mamba_dt_rank": 256, "tie_word_embeddings": False},
    "LiquidAI/LFM2-350M": {"model_type": "lfm2", "vocab_size": 65536, "hidden_size": 1024, "block_ff_dim": 6656,
                           "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 8,
                           "conv_dim": 1024, "tie_embedding": True,
                           "layer_types": ["conv", "conv", "full_attention"] * 3 + ["conv", "full_attention"] * 3 + [
                               "conv"]},
    "baidu/ERNIE-4.5-21B-A3B-PT": {"model_type": "ernie4_5_moe", "vocab_size": 103424, "hidden_size": 2560,
                                   "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 28,
                                   "num_attention_heads": 20, "num_key_value_heads": 4, "moe_num_experts": 64,
                                   "moe_num_shared_experts": 2, "moe_k": 6, "moe_layer_start_index": 1,
                                   "moe_layer_end_index": 27, "moe_layer_interval": 1, "tie_word_embeddings": True},
    "databricks/dbrx-instruct": {"model_type": "dbrx", "vocab_size": 100352, "d_model": 6144, "n_heads": 48,
                                 "n_layers": 40, "max_seq_len": 32768, "tie_word_embeddings": False,
                                 "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
                                 "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}},
    "meta-llama/Llama-4-Scout-17B-16E (text_config)": {
        "model_type": "llama4_text", "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "tie_word_embeddings": False},
    "nemotron_h (a config.json in the hub's form: Nemotron-H-4B's 52-layer pattern, transformers' default widths)": {
        "model_type": "nemotron_h", "vocab_size": 131072, "hidden_size": 4096, "intermediate_size": 21504,
        "num_hidden_layers": 52, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4,
        "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        "tie_word_embeddings": False},
    "gemma4_text (transformers' Gemma4TextConfig defaults, 30 layers)": {"model_type": "gemma4_text"},
    **{f"{t} (transformers' defaults)": {"model_type": t} for t in (  # once counted by copied config tables
        "bailing_hybrid", "dory", "dots3_note_text", "flint", "hy_v4", "inkling2_loop_text", "laguna", "lara_mini",
        "phi4_multimodal", "zamba2", "zaya")},
    "Qwen/Qwen2.5-72B": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 8192,
                         "intermediate_size": 29568, "num_hidden_layers": 80, "num_attention_heads": 64,
                         "num_key_value_heads": 8, "tie_word_embeddings": False},
    "reformer (transformers' defaults as a decoder)": {"model_type": "reformer", "is_decoder": True},
}
PLAN = ("import sys, runpy; sys.argv = ['trl_ds.plan', sys.argv[1], 'cluster=1x1', '--json']\n"
        "try:\n    runpy.run_module('trl_ds.plan', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, file=sys.stderr)\n")


def plan_once(model: str, cache: str) -> tuple:
    """(wall seconds, parameters, whether torch was imported) of one fresh plan."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PLAN, model], cwd=REPO, check=True, capture_output=True, text=True,
                         env={**os.environ, "TRL_DS_CACHE": cache})
    wall = time.perf_counter() - started
    return wall, json.loads(out.stdout)["parameters"], out.stderr.split()[-1] == "True"


def row(name: str, walls: list, params: int, torch: bool) -> str:
    return (f"{name}: {params:,} parameters, median {statistics.median(walls):.2f} s (min {min(walls):.2f}, "
            f"max {max(walls):.2f}){', imports torch' if torch else ''}")


def presets(runs: int) -> None:
    for path in sorted(glob.glob(str(REPO / "conf/model/*.yaml"))):
        name = Path(path).stem
        walls, params, torch = [], 0, False
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as cache:
                wall, params, torch = plan_once(f"model={name}", cache)
            walls.append(wall)
        print(row(f"preset {name}", walls, params, torch), flush=True)


def config(name: str, folder: Path, runs: int) -> None:
    first, later, counted = [], [], set()
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            wall, params, torch_first = plan_once(f"model.name_or_path={folder}", cache)
            first.append(wall)
            wall, again, torch_later = plan_once(f"model.name_or_path={folder}", cache)
            later.append(wall)
            counted |= {params, again}
    assert len(counted) == 1, counted
    print(row(f"{name}, first plan", first, params, torch_first), flush=True)
    print(row(f"{name}, later plans", later, params, torch_later), flush=True)


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="'presets' and/or these configs' names (default: all)")
    args = parser.parse_args(argv)
    if not args.only or "presets" in args.only:
        presets(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        for name, raw in CONFIGS.items():
            if args.only and name not in args.only:
                continue
            folder = Path(tmp) / name.split(" ")[0].replace("/", "_")
            folder.mkdir(parents=True)
            (folder / "config.json").write_text(json.dumps(raw))
            config(name, folder, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
