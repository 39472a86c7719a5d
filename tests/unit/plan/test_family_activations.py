"""Each family's activation coefficients (trl_ds/plan/saved_activations.py) re-measured on CPU: one sampled shape of
each kind of layer in bf16 and fp32, and a small model of each family whose saved bytes, layer by layer, are what the
planner charges (scripts/study/measure_activations.py measures; see its --family fits)."""
import random
from dataclasses import replace

import pytest
import torch

from scripts.study import measure_activations as ma
from trl_ds.plan import memory as est
from trl_ds.plan.params import count_params, from_config
from trl_ds.plan.saved_activations import COEFFICIENTS, layer_bytes, measured

# activations measured with torch, family by family: make test only (not make test-fast)
pytestmark = pytest.mark.slow

DTYPES = [(torch.bfloat16, 2), (torch.float32, 4)]
KINDS = [(t, k) for t, kinds in COEFFICIENTS.items() for k in kinds]
def test_every_fast_family_is_measured():
    fast = {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gemma",
            "gemma2", "gemma3_text", "phi3", "olmo2"}
    assert fast <= set(COEFFICIENTS)
    assert {t for t, _ in ma.FAMILY_KINDS} | {"gemma2"} == set(COEFFICIENTS)


@pytest.mark.parametrize("dtype,width", DTYPES)
@pytest.mark.parametrize("model_type,kind", KINDS)
def test_layer_coefficients_are_the_measured_ones(model_type, kind, dtype, width):
    """A shape the fit did not see (its own seed): the last layer's saved bytes are what the coefficients give."""
    raw, batch, seq = ma.sample_config(model_type, kind, random.Random(f"test/{model_type}/{kind}"))
    saved = ma.saved_by_layer(ma.build_family(raw, dtype), batch, seq)[-1]
    arch = from_config(raw, "test")
    assert saved == layer_bytes(arch, width, batch * seq, seq, kind)


@pytest.mark.parametrize("kv,group", [(1, 2), (2, 2), (2, 1)])
@pytest.mark.parametrize("batch", [1, 2])
def test_eager_attention_saves_k_and_v_per_head_unless_one_sequence_and_kv_head(kv, group, batch):
    """Gemma-2's eager matmuls fold (batch, heads): with one sequence and one kv head the repeated k and v stay a
    view of the kv head, else each is saved as a copy for every head."""
    raw, _, seq = ma.sample_config("gemma2", "dense", random.Random("eager"))
    raw.update(num_key_value_heads=kv, num_attention_heads=kv * group)
    saved = ma.saved_by_layer(ma.build_family(raw, torch.bfloat16), batch, seq)[-1]
    assert saved == layer_bytes(from_config(raw, "test"), 2, batch * seq, seq, "dense")


# a small model of each family whose layers mix the kinds the planner tells apart
MIXED = {"gemma2": {}, "gemma3_text": {"layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
                                       "sliding_window": 8},
         "deepseek_v3": {"first_k_dense_replace": 1}, "qwen2_moe": {"decoder_sparse_step": 1}}


@pytest.mark.parametrize("model_type", sorted(COEFFICIENTS))
def test_planner_activations_equal_the_measured_bytes(compose_cfg, model_type):
    kind = "moe" if "moe" in COEFFICIENTS[model_type] else "dense"
    raw, _, _ = ma.sample_config(model_type, kind, random.Random(f"model/{model_type}"))
    raw = {**raw, "num_hidden_layers": 3, **MIXED.get(model_type, {})}
    if model_type == "gemma2":
        raw.pop("layer_types")  # transformers' default: sliding, full, sliding
    batch, seq = 2, 24
    saved = sum(ma.saved_by_layer(ma.build_family(raw, torch.bfloat16), batch, seq))
    arch = from_config(raw, "test")
    s = replace(est.setup_from_config(compose_cfg([])), arch=arch, counts=count_params(arch), dtype="bf16",
                micro_batch=batch, seq_len=seq, gradient_checkpointing=False)
    assert saved == est.activations(s)


def test_the_same_config_measures_the_same_bytes():
    """DeepSeek-V3's group-limited routing saves tensors whose graph forward drops; the allocator reuses their
    addresses, which once made the count depend on what the process had allocated before."""
    raw, batch, seq = ma.sample_config("deepseek_v3", "moe", random.Random("same/deepseek_v3"))
    raw["n_group"] = raw["topk_group"] = 2
    runs = {tuple(ma.saved_by_layer(ma.build_family(raw, torch.bfloat16), batch, seq)) for _ in range(3)}
    assert len(runs) == 1


@pytest.mark.parametrize("model_type,kind", [("gemma3_text", "dense"), ("phi3", "dense"), ("mixtral", "moe"),
                                             ("deepseek_v3", "dense"), ("deepseek_v3", "moe")])
def test_a_checkpointed_layer_keeps_its_input(model_type, kind):
    raw, batch, seq = ma.sample_config(model_type, kind, random.Random(f"ckpt/{model_type}"))
    model = ma.build_family(raw, torch.bfloat16, checkpointing=True)
    assert ma.saved_by_layer(model, batch, seq)[-1] == 2 * raw["hidden_size"] * batch * seq


def test_an_unmeasured_family_is_charged_llamas_coefficients():
    llama = est.Architecture(model_type="llama", vocab_size=1000, hidden_size=96, intermediate_size=224,
                             num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=3, head_dim=16)
    other = replace(llama, model_type="starcoder2")
    assert not measured("starcoder2")
    assert layer_bytes(other, 2, 64, 32, "dense") == layer_bytes(llama, 2, 64, 32, "dense") == 64 * (
        16 * 96 + 8 * 224 + 4 * 96 + 4 * 48 + 4 * 6 + 8)
