"""The model named by model.name_or_path (a folder or a hub id whose config.json is in the Hugging Face cache) is
the architecture the planner, the preflight, plan.json and the summary use; an unknown one is refused with exit 2
before anything is written."""
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO, read_json, run_app
from transformers import AutoConfig, AutoModelForCausalLM

from trl_ds.cli.plan import main as plan_main
from trl_ds.plan import params

pytestmark = pytest.mark.slow  # counts hub models on the meta device in fresh processes: make test only

# Qwen/Qwen2.5-7B's and Qwen/Qwen2.5-72B's config.json (the keys that shape the model), as the hub serves them.
QWEN_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
           "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
           "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
QWEN_72B = {**QWEN_7B, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
            "num_attention_heads": 64, "num_key_value_heads": 8}


def meta_count(raw: dict) -> int:
    raw = {k: v for k, v in raw.items() if k != "architectures"}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**raw))
    return sum(p.numel() for p in model.parameters())


def hf_cache(tmp_path, repos: dict) -> dict:
    """A Hugging Face cache as huggingface_hub lays it out (config.json only), and the environment that uses it."""
    hub = tmp_path / "hf" / "hub"
    for repo_id, config in repos.items():
        repo = hub / f"models--{repo_id.replace('/', '--')}"
        (repo / "snapshots" / "0123abcd").mkdir(parents=True)
        (repo / "snapshots" / "0123abcd" / "config.json").write_text(json.dumps(config))
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0123abcd")
    return {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}


def plan(env, *args):
    return subprocess.run([sys.executable, "-m", "trl_ds.plan", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_uncached_hub_id_offline_is_refused_before_anything_is_written(tmp_path):
    env = hf_cache(tmp_path, {})
    expected = ("model.name_or_path=Qwen/Qwen2.5-72B: its config.json is not in the Hugging Face cache and "
                "HF_HUB_OFFLINE=1 forbids downloading it, so the architecture is unknown. Download it first (hf "
                "download Qwen/Qwen2.5-72B config.json), or give a folder written by save_pretrained "
                "(model.name_or_path=/path/to/model) or the model's config.json "
                "(model.config_path=/path/to/config.json).")
    out = plan(env, "model.name_or_path=Qwen/Qwen2.5-72B", "cluster=1x1")
    assert out.returncode == 2 and expected in out.stderr and "Traceback" not in out.stderr
    run_dir = tmp_path / "run"
    out = run_app(["model.name_or_path=Qwen/Qwen2.5-72B", "cluster=1x1", "cluster.gpu_memory_gb=24", "zero=stage0",
                   "dry_run=true"], run_dir, timeout=120, env=env)
    assert out.returncode == 2 and expected in out.stderr and "Traceback" not in out.stderr
    assert not run_dir.exists()


def test_cached_hub_id_is_planned_exactly_and_torch_free_once_counted(tmp_path, monkeypatch):
    """Its first plan builds it on the meta device (here, in this process: it imports torch); the next plan, in a
    fresh process, reads the count back without torch, deepspeed or transformers."""
    env = {**hf_cache(tmp_path, {"Qwen/Qwen2.5-7B": QWEN_7B}), "TRL_DS_CACHE": str(tmp_path / "cache")}
    monkeypatch.setenv("TRL_DS_CACHE", env["TRL_DS_CACHE"])
    params.entry.cache_clear()  # counted afresh, so that it is kept in this test's cache
    counts = params.count_params(params.from_config(QWEN_7B, "the hub's config.json"))
    assert counts.total == counts.active == meta_count(QWEN_7B) == 7_615_616_512  # model card
    code = ("import sys, runpy; sys.argv = ['trl_ds.plan', 'model.name_or_path=Qwen/Qwen2.5-7B', 'cluster=1x1', "
            "'cluster.gpu_memory_gb=24', '--fits']\n"
            "try:\n    runpy.run_module('trl_ds.plan', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    lines = out.stdout.strip().splitlines()
    assert lines[0] == ("trl_ds plan: Qwen/Qwen2.5-7B (7.62B parameters, largest module 545.00M), bf16, sequence "
                        "64 tokens")
    assert lines[1].startswith("architecture: qwen2, 28 layers, hidden 3584, from config.json of hub model "
                               "Qwen/Qwen2.5-7B (") and "; count exact (" in lines[1]
    assert lines[-1] == "[]"  # neither torch, nor deepspeed, nor transformers
    data = json.loads(plan(env, "model.name_or_path=Qwen/Qwen2.5-7B", "cluster=1x1", "--json").stdout)
    assert (data["model"], data["parameters"], data["active_parameters"]) == ("Qwen/Qwen2.5-7B", counts.total,
                                                                            counts.active)


def test_the_app_preflights_the_named_model_not_the_preset(tmp_path):
    """The issue's reproduction: Qwen2.5-72B on one 24 GiB GPU must not pass as the tiny preset."""
    env = hf_cache(tmp_path, {"Qwen/Qwen2.5-72B": QWEN_72B})
    run_dir = tmp_path / "run"
    out = run_app(["model.name_or_path=Qwen/Qwen2.5-72B", "cluster=1x1", "cluster.gpu_memory_gb=24", "zero=stage0",
                   "dry_run=true"], run_dir, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "model.name_or_path=Qwen/Qwen2.5-72B does not fit on cluster=1x1 (ZeRO-0" in out.stderr
    assert "model Qwen/Qwen2.5-72B" in out.stdout
    data = read_json(run_dir / "plan.json")
    assert (data["model"], data["parameters"]) == ("Qwen/Qwen2.5-72B", meta_count(QWEN_72B))
    assert data["preflight"]["verdict"] == "does not fit"


def plan_here(capsys, *args):
    """The planner in this process (no hub access needed): (exit code, stdout)."""
    code = plan_main(list(args))
    return code, capsys.readouterr().out


def test_folder_wins_over_the_preset_and_the_output_says_so(tmp_path, capsys):
    raw = {"model_type": "qwen3", "vocab_size": 5000, "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
           "tie_word_embeddings": True}
    (tmp_path / "my-qwen").mkdir()
    (tmp_path / "my-qwen" / "config.json").write_text(json.dumps(raw))
    code, text = plan_here(capsys, "model=llama3-8b", f"model.name_or_path={tmp_path}/my-qwen", "cluster=1x1")
    assert code == 0
    assert text.splitlines()[1].startswith(f"architecture: qwen3, 3 layers, hidden 256, from config.json in "
                                           f"{tmp_path}/my-qwen; preset model=llama3-8b's dimensions not used; count "
                                           f"exact (")
    data = json.loads(plan_here(capsys, "model=llama3-8b", f"model.name_or_path={tmp_path}/my-qwen", "--json")[1])
    assert (data["model"], data["parameters"]) == (f"{tmp_path}/my-qwen", meta_count(raw))
    assert data["architecture"]["source"] == f"config.json in {tmp_path}/my-qwen"


def test_a_config_is_counted_on_the_meta_device_and_says_so(tmp_path, capsys):
    """flint with prelu, an activation holding a tensor."""
    raw = {"model_type": "flint", "vocab_size": 3000, "hidden_size": 128, "intermediate_size": 256,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "hidden_act": "prelu"}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    code, out = plan_here(capsys, f"model.name_or_path={tmp_path}", "cluster=1x1", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["parameters"] == meta_count(raw) and data["architecture"]["count"] == "meta"
    text = plan_here(capsys, f"model.name_or_path={tmp_path}", "cluster=1x1")[1]
    assert "count exact (transformers on the meta device)" in text
