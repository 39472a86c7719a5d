"""Mixture-of-experts models train on 2 CPU ranks under ZeRO-2 and ZeRO-3 (one with CPU offload) without hanging:
a tiny Mixtral and a tiny Qwen3-MoE, folders built here from a transformers config with trl_ds's tokenizer. The
engine's model states equal the estimate within 1 %, ZeRO-3 gathers each MoE block whole (a leaf module), and the
exported model reloads in transformers with the engine's logits."""
import json
import math

import pytest
from conftest import read_json, run_app

pytestmark = [pytest.mark.integration, pytest.mark.beside, pytest.mark.xdist_group("beside")]

DIMS = {"vocab_size": 512, "hidden_size": 128, "intermediate_size": 192, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
FAMILIES = {"mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
            "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 96, "head_dim": 32}}
# Both families at ZeRO-3 (each MoE block gathered whole as a leaf module), one at ZeRO-2 as well.
RUNS = {"mixtral-stage3": ("mixtral", ["zero=stage3"]), "qwen3_moe-stage2": ("qwen3_moe", ["zero=stage2"]),
        "qwen3_moe-stage3-cpu": ("qwen3_moe", ["zero=stage3", "offload=cpu"])}
LEAF = {"mixtral": ["MixtralSparseMoeBlock"], "qwen3_moe": ["Qwen3MoeSparseMoeBlock"]}
KINDS = ("params", "gradients", "optimizer")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One save_pretrained folder per family, with the tokenizer trl_ds's tiny data uses."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from trl_ds.worker.models import build_tokenizer, save_tokenizer

    made = {}
    for family, extra in FAMILIES.items():
        tokenizer = build_tokenizer()
        config = AutoConfig.for_model(family, **DIMS, **extra, pad_token_id=tokenizer.pad_token_id,
                                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(family) / "model"
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
        save_tokenizer(tokenizer, str(folder))  # as trl_ds saves it, so AutoTokenizer reads it as itself
        made[family] = folder
    return made


@pytest.mark.parametrize("name", list(RUNS))
def test_moe_trains_matches_the_estimate_and_reloads(name, folders, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    family, overrides = RUNS[name]
    run_dir = tmp_path / "run"
    out = run_app([f"model.name_or_path={folders[family]}", *overrides, "trainer.max_steps=2"], run_dir, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary, plan = read_json(run_dir / "summary.json"), read_json(run_dir / "plan.json")
    assert summary["steps"] == 2 and math.isfinite(summary["final_loss"])
    assert summary["zero3_leaf_modules"] == LEAF[family]  # DeepSpeed's zero_optimization.leaf_module default
    # the planner counted the folder's model, every expert, exactly as the engine holds it
    assert plan["model"] == str(folders[family]) and plan["parameters"] == summary["total_parameters"]
    assert plan["architecture"]["num_experts"] == 4 and plan["architecture"]["experts_per_token"] == 2
    assert plan["active_parameters"] < plan["parameters"]
    estimated = {k: sum(v.values()) for k, v in plan["current"]["after_step_bytes"].items()}
    total = sum(estimated.values())
    for rank in (0, 1):
        measured = read_json(run_dir / "memory" / f"rank_{rank}.json")["model_states"]
        for kind in KINDS:
            assert sum(measured[kind].values()) == pytest.approx(estimated.get(kind, 0), rel=0.01, abs=0.01 * total)
    probe = torch.load(run_dir / "final_model" / "probe_logits.pt")
    model = AutoModelForCausalLM.from_pretrained(run_dir / "final_model").eval()
    with torch.no_grad():
        logits = model(input_ids=probe["input_ids"]).logits
    assert torch.allclose(logits, probe["logits"], rtol=1e-5, atol=1e-5)
    assert json.loads((run_dir / "final_model" / "config.json").read_text())["model_type"] == family
