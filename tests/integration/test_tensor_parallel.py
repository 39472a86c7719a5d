"""tp=autotp trained for real: DeepSpeed AutoTP on 2 CPU ranks (gloo), TRL's SFTTrainer, the tiny Llama.

Three launches shared by the module: tp.size=1 for 6 steps (data-parallel, micro 2 × 2 ranks: stage_runs' ZeRO-2 run,
which other modules read too), and tp.size=2 for 4
steps with a checkpoint every 3 (both ranks read the same 4 samples; transformers saves the last step's too) relaunched
in its run dir to 6, which resumes from checkpoint-4, so steps 5 and 6 train on the update made after a save. The
global batch is 4 in both. Expected values come from the tp.size=1 run, from DeepSpeed's own
split (the unit tests hold the planner to it) and from the whole model loaded by transformers.
"""
import json

import pytest
from conftest import read_json, run_app
from stage_runs import STEPS, stage_run
from token_counts import expected_num_tokens, logged_num_tokens

pytestmark = pytest.mark.integration

# fp32 on both sides; tp.size=2 only reorders sums (each rank's partial matmul, then the all-reduce), so the losses
# differ by rounding. Measured: at most 8.8e-8 relative over these 6 steps (tiny Llama), 8.9e-8 over 4 (tiny Qwen2,
# docs/parallelism.md); 1e-6 leaves ~10x room. The test's own bound, not trl_ds.study.equivalence's.
LOSS_RTOL = 1e-6

TP2 = ["tp=autotp", "tp.size=2", "trainer.per_device_train_batch_size=4", "checkpoint.every_steps=3"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("tensor_parallel")
    tp1, tp2 = stage_run("stage2", tmp_path_factory)[0], base / "tp2"  # tp.size=1 is the default
    first = run_app([*TP2, "trainer.max_steps=4"], tp2)
    assert first.returncode == 0, first.stderr[-3000:]
    memory = {rank: read_json(tp2 / "memory" / f"rank_{rank}.json") for rank in (0, 1)}
    resumed = run_app([*TP2, f"trainer.max_steps={STEPS}"], tp2)  # the same run dir, 2 more steps
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return {"tp1": tp1, "tp2": tp2, "resumed": resumed, "memory": memory}


def losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_tp2_trains_to_the_tp1_losses_and_resumes(runs):
    one, two = losses(runs["tp1"]), losses(runs["tp2"])
    assert sorted(one) == sorted(two) == list(range(1, STEPS + 1))  # steps 5 and 6 come from the relaunch
    for step in one:
        assert two[step] == pytest.approx(one[step], rel=LOSS_RTOL), step
    assert "resuming from" in runs["resumed"].stdout + runs["resumed"].stderr
    assert "checkpoint-4" in runs["resumed"].stdout + runs["resumed"].stderr
    summary = read_json(runs["tp2"] / "summary.json")
    assert (summary["tensor_parallel_size"], summary["world_size"], summary["global_batch"]) == (2, 2, 4)


def test_num_tokens_are_the_rows_tokens_under_tp_and_after_the_resume(runs):
    """Both tp ranks read the same rows: counted once (TRL divided by accelerate's tp size 1: twice). Steps 5 and 6
    come from the relaunch, which continues the checkpoint's count (it restarted from 0)."""
    expected = expected_num_tokens(runs["tp2"], global_batch=4, steps=STEPS)
    assert logged_num_tokens(runs["tp1"]) == expected
    assert logged_num_tokens(runs["tp2"]) == expected
    assert read_json(runs["tp2"] / "summary.json")["num_tokens"] == expected[STEPS]


def test_engine_parameter_bytes_per_rank_are_the_plans(runs, compose_cfg):
    from trl_ds.plan.params import architecture, count_params
    from trl_ds.plan.tensor_parallel import local_architecture

    arch = architecture(compose_cfg(["model=tiny"]).model)
    total, per_rank = count_params(arch).total, count_params(local_architecture(arch, 2)).total
    split_linears = 2 * (total - per_rank)  # an even split: per rank the whole part and half the split linears
    for rank in (0, 1):
        measured = runs["memory"][rank]
        assert 4 * measured["parameters"] == pytest.approx(4 * per_rank, rel=0.01)  # fp32, the engine's module
        # Storage after the run's last checkpoint: saving gathers each split weight and re-splits it into a fresh
        # tensor beside ZeRO's flat buffer (deepspeed GatherReplacedLayerParams -> LinearLayer.uneven_partition);
        # the next optimizer step points the weights back into the buffer, but the final save has no next step.
        held = sum(measured["model_states"]["params"].values())
        assert held == 4 * (per_rank + split_linears // 2)
    whole = read_json(runs["tp1"] / "memory" / "rank_0.json")
    assert sum(whole["model_states"]["params"].values()) == pytest.approx(4 * total, rel=0.01)
    assert per_rank / whole["parameters"] == pytest.approx(0.576, abs=0.001)  # lm_head, embeddings whole


def test_final_model_is_whole_and_reproduces_the_engine(runs):
    import torch
    from transformers import AutoModelForCausalLM

    final = runs["tp2"] / "final_model"
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    reference = AutoModelForCausalLM.from_pretrained(runs["tp1"] / "final_model")
    shapes = {n: tuple(p.shape) for n, p in reference.named_parameters()}
    assert {n: tuple(p.shape) for n, p in model.named_parameters()} == shapes  # gathered from both shards
    probe = torch.load(final / "probe_logits.pt")
    with torch.no_grad():
        logits = model(input_ids=probe["input_ids"]).logits
    assert torch.allclose(logits, probe["logits"], rtol=1e-5, atol=1e-5)


def test_tp_size_change_in_one_run_dir_is_refused(runs):
    out = run_app(["tp=none", *TP2[2:], f"trainer.max_steps={STEPS}"], runs["tp2"])
    assert out.returncode == 2
    assert "already holds a run of another config (tp.name: 'autotp' → 'none', tp.size: 2 → 1)" in out.stderr
