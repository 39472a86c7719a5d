"""Real training of every trainer on 2 CPU ranks with DeepSpeed ZeRO-3 (KTO at ZeRO-2: the stage-0 reference engine
prepare_deepspeed builds below ZeRO-3), LoRA, Ulysses and checkpointing.

Each run is the tiny model for a few steps (15-30 s). Runs are seeded, so the learning checks are deterministic.
"""
import json
import math
import subprocess
import sys

import pytest
from conftest import read_json, run_app

from trl_ds.launch import spawn_env

pytestmark = pytest.mark.integration

LN2 = math.log(2)  # DPO's and the reward model's loss when chosen and rejected are scored alike
LARGER = ["model.hidden_size=512", "model.intermediate_size=1408", "model.num_attention_heads=8",
          "model.num_key_value_heads=4"]  # 12.3M parameters: most tensors above ZeRO-3's persistence threshold
RUNS = {
    "dpo-stage3": ["trainer=dpo", "zero=stage3", "trainer.max_steps=6"],
    "reward-stage3": ["trainer=reward", "zero=stage3", "trainer.max_steps=8", "trainer.per_device_train_batch_size=8"],
    # beta 0.1: TRL builds the reference model (test_trainer_memory weighs it in this run)
    "grpo-stage3": ["trainer=grpo", "zero=stage3", "trainer.beta=0.1", "trainer.max_steps=4"],
    # KTO and RLOO: one run each, also weighed by test_trainer_memory; KTO through trl_ds's worker (test_user_script
    # compares TRL's kto.py with this run), RLOO through TRL's own rloo.py (script=). RLOO's preset beta 0.05 builds
    # the reference; the larger model has tensors above the persistence threshold, so ZeRO-3 partitions them and
    # generation really gathers them (ds3_gather_for_generation)
    "kto-stage2": ["trainer=kto", "zero=stage2", "trainer.max_steps=4"],
    "rloo-script-stage3-larger": ["script=trl.scripts.rloo", "trainer=rloo", "zero=stage3", "trainer.max_steps=3",
                                  *LARGER],
    # threshold 0: the small adapter matrices are partitioned too, as a large model's are (a saved adapter must
    # then be gathered from every rank)
    "lora-stage3": ["peft=lora", "zero=stage3", "trainer.max_steps=6", "zero.stage3_param_persistence_threshold=0"],
    "ulysses-stage3": ["sp=ulysses", "zero=stage3", "trainer.max_steps=6"],
    "one-rank-checkpointing": ["cluster.gpus_per_node=1", "zero=stage3", "trainer.gradient_checkpointing=true",
                               "trainer.max_steps=6"],
}
_done = {}


def train(name, tmp_path_factory):
    """Run once per session; returns (run dir, summary, metrics records)."""
    if name not in _done:
        run_dir = tmp_path_factory.mktemp(name) / "run"
        out = run_app(RUNS[name], run_dir)
        assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
        summary = read_json(run_dir / "summary.json")
        assert summary["status"] == "completed" and summary["world_size"] in (1, 2)
        assert summary["steps"] == int(next(a for a in RUNS[name] if "max_steps" in a).split("=")[1])
        with open(run_dir / "metrics.jsonl") as f:
            records = [json.loads(line) for line in f if '"loss"' in line]
        _done[name] = (run_dir, summary, records)
    return _done[name]


def mean(values):
    return sum(values) / len(values)


# ZeRO-3 only: DPO's loss and rewards are the same code at every stage, and ZeRO-2's reference (a stage-0 engine,
# prepare_deepspeed) is KTO's below, whose step 1 proves it equals the policy as DPO's ln 2 would
@pytest.mark.parametrize("stage", [3])
def test_dpo_moves_away_from_its_reference(stage, tmp_path_factory):
    run_dir, summary, records = train(f"dpo-stage{stage}", tmp_path_factory)
    losses = [r["loss"] for r in records]
    assert abs(losses[0] - LN2) < 1e-4  # step 1: policy == reference model, whatever the data
    assert all(math.isfinite(x) for x in losses) and mean(losses[1:]) < LN2
    assert mean([r["rewards/margins"] for r in records[1:]]) > 0  # chosen scored above rejected
    assert read_json(run_dir / "ds_config.json")["zero_optimization"]["stage"] == stage


@pytest.mark.parametrize("stage", [3])  # ZeRO-2's training path is every SFT and KTO run's: one run per behaviour
def test_reward_model_learns_to_rank_chosen_first(stage, tmp_path_factory):
    _, summary, records = train(f"reward-stage{stage}", tmp_path_factory)
    losses = [r["loss"] for r in records]
    assert all(math.isfinite(x) for x in losses)
    assert mean(losses[len(losses) // 2:]) < losses[0]
    assert mean([r["margin"] for r in records[len(records) // 2:]]) > 0
    assert summary["total_parameters"] == summary["trainable_parameters"] == 869_504 - 65_536 + 128  # lm_head→score


@pytest.mark.parametrize("stage", [3])  # generation from parameters ZeRO-3 gathers: the hard case
def test_grpo_generates_scores_and_updates(stage, tmp_path_factory):
    _, summary, records = train(f"grpo-stage{stage}", tmp_path_factory)
    for r in records:
        assert 0 <= r["reward"] <= 1 and math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"])
        assert r["completions/max_length"] <= 4  # trainer.max_completion_length in the preset
    scored_apart = [r for r in records if r["reward_std"] > 0]  # a group's completions got different rewards
    assert scored_apart and all(r["grad_norm"] > 0 for r in scored_apart)  # and those advantages reach the weights
    assert summary["global_batch"] == 4  # one prompt × num_generations=4 per step


def test_kto_starts_at_its_reference_and_logs_its_own_terms(tmp_path_factory):
    """Step 1: policy == reference, so every log-ratio and the KL estimate are 0 and KTO's loss
    1 - sigmoid(beta * (log-ratio - KL)) is 0.5 for desirable and undesirable examples alike (kto_trainer.py)."""
    _, summary, records = train("kto-stage2", tmp_path_factory)
    assert records[0]["loss"] == pytest.approx(0.5, abs=1e-6) and records[0]["kl"] == 0
    for r in records:
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) and r["kl"] >= 0
        assert {"rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected"} <= set(r)
    assert summary["global_batch"] == 4  # micro 2 × 2 ranks: each micro-batch its own KL completions


def test_trl_rloo_script_generates_scores_with_a_kl_penalty_and_updates(tmp_path_factory):
    """TRL's installed rloo.py, unchanged: its parser took the run dir's trainer.yaml (reward_funcs by dotted path,
    beta, num_generations) and its RLOOTrainer trained at ZeRO-3, recorded as the worker's trainers are."""
    run_dir, summary, records = train("rloo-script-stage3-larger", tmp_path_factory)
    assert summary["script"] == "trl.scripts.rloo"
    assert (run_dir / "trainer" / "model.safetensors").exists()  # rloo.py's own save, into the run dir
    assert records[0]["kl"] == 0  # the policy before its first update is the reference
    for r in records:
        assert 0 <= r["reward"] <= 1 and math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"])
        assert r["completions/max_length"] <= 4 and "kl" in r  # the preset's max_completion_length; beta 0.05
    assert summary["global_batch"] == 4 and summary["total_parameters"] == 12_325_376


def test_lora_trains_only_the_adapters(tmp_path_factory):
    """Rank 8 on q, k, v, o of 4 layers (hidden 128, kv width 64): 4 × 8 × (256 + 192 + 192 + 256) = 28,672."""
    run_dir, summary, records = train("lora-stage3", tmp_path_factory)
    hidden, kv, r, layers = 128, 64, 8, 4
    lora = layers * r * ((hidden + hidden) + (hidden + kv) + (hidden + kv) + (hidden + hidden))
    assert summary["trainable_parameters"] == lora == 28_672
    assert summary["total_parameters"] == 869_504 + lora
    plan = read_json(run_dir / "plan.json")  # the planner counted the same split before launch
    assert (plan["parameters"], plan["trainable_parameters"]) == (869_504 + lora, lora)
    losses = [r["loss"] for r in records]
    assert losses[-1] < losses[0]


def test_lora_adapter_saved_under_zero3_is_whole_and_reproduces_the_engine(tmp_path_factory):
    """final_model/adapter_model.safetensors holds every adapter matrix whole (rank 8; A: 8 × 128 in, B: out × 8),
    and PEFT loading it onto the base model gives the trained engine's logits (probe_logits.pt) within 1e-5."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    run_dir, _, _ = train("lora-stage3", tmp_path_factory)
    adapter = load_file(run_dir / "final_model" / "adapter_model.safetensors")
    outputs = {"q_proj": 128, "k_proj": 64, "v_proj": 64, "o_proj": 128}
    expected = {f"base_model.model.model.layers.{i}.self_attn.{m}.lora_{ab}.weight": (8, 128) if ab == "A" else (out, 8)
                for i in range(4) for m, out in outputs.items() for ab in "AB"}
    assert {k: tuple(v.shape) for k, v in adapter.items()} == expected
    assert all(v.abs().sum() > 0 for v in adapter.values())  # lora_B starts at zero: these are the trained values
    probe = torch.load(run_dir / "final_model" / "probe_logits.pt")
    base = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    model = PeftModel.from_pretrained(base, run_dir / "final_model").eval()
    with torch.no_grad():
        logits = model(input_ids=probe["input_ids"]).logits
    assert torch.allclose(logits, probe["logits"], rtol=1e-5, atol=1e-5)
    with torch.no_grad(), model.disable_adapter():  # and the adapters matter: the base model alone differs
        assert (model(input_ids=probe["input_ids"]).logits - logits).abs().max() > 1e-4


def test_ulysses_and_checkpointing_change_memory_not_math(tmp_path_factory):
    """2 ranks sharing each sequence (sp=ulysses) train exactly like 1 rank holding it whole, here with
    activation checkpointing on: same batches, same losses, step by step."""
    _, sp_summary, sp_records = train("ulysses-stage3", tmp_path_factory)
    _, one_summary, one_records = train("one-rank-checkpointing", tmp_path_factory)
    assert (sp_summary["world_size"], sp_summary["sequence_parallel_size"], sp_summary["global_batch"]) == (2, 2, 2)
    assert (one_summary["world_size"], one_summary["gradient_checkpointing"]) == (1, True)
    sp_losses, one_losses = [r["loss"] for r in sp_records], [r["loss"] for r in one_records]
    assert sp_losses == pytest.approx(one_losses, rel=1e-5)
    assert sp_losses[-1] < sp_losses[0]


def test_accelerate_launch_runs_the_run_dir(tmp_path):
    """accelerate.yaml drives a real `accelerate launch` of the same worker: 2 ranks, DeepSpeed ZeRO-3."""
    run_dir = tmp_path / "run"
    out = run_app(["zero=stage3", "trainer.max_steps=2", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    accelerate = [sys.executable, "-m", "accelerate.commands.launch"]
    # Launched in the run dir: accelerate.yaml's paths are relative to it. With the venv first on PATH, as from an
    # activated venv: another ninja would rebuild DeepSpeed's JIT ops (twice: here, then in the next run).
    launched = subprocess.run([*accelerate, "--config_file", str(run_dir / "accelerate.yaml"),
                               "-m", "trl_ds.worker.train", str(run_dir)],
                              cwd=run_dir, capture_output=True, text=True, timeout=900, env=spawn_env())
    assert launched.returncode == 0, launched.stderr[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert (summary["world_size"], summary["distributed_type"], summary["steps"]) == (2, "DEEPSPEED", 2)
