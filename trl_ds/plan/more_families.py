"""The families params.py counts from their config beyond its Llama-shaped core, as transformers 5 writes them:
starcoder2 (plain MLP, one use_bias switch, LayerNorm), granite (Llama's layout), olmoe (Mixtral's fused experts
with OLMo's QK-norm over whole projections) and phimoe (Mixtral's experts, LayerNorm, an optional lm_head bias).
Without these the planner builds them on the meta device, which imports torch (seconds, not a fraction of one).
tests/unit/test_model_families.py holds each to a meta-device instantiation, exact to the parameter.
"""
from typing import List

MORE_TYPES = ("starcoder2", "granite", "olmoe", "phimoe")
FUSED_EXPERT_TYPES = ("mixtral", "olmoe", "phimoe")  # every layer MoE; experts intermediate_size wide
LAYER_NORM_TYPES = ("starcoder2", "phimoe")  # nn.LayerNorm: a weight and a bias
# transformers' defaults for keys a config.json may leave out (configuration_<family>.py)
MORE_DEFAULTS = {
    "starcoder2": {"num_key_value_heads": 2, "use_bias": True, "tie_word_embeddings": True},
    "olmoe": {"num_experts": 64, "num_experts_per_tok": 8},
    "phimoe": {"num_key_value_heads": 8, "num_local_experts": 16, "num_experts_per_tok": 2, "lm_head_bias": False},
}


def norm_tensors(model_type: str, width: int) -> List[int]:
    return [width, width] if model_type in LAYER_NORM_TYPES else [width]


def uses_bias(raw: dict, key: str) -> bool:
    """starcoder2's one use_bias (every Linear of a layer); the other families' own key."""
    if raw["model_type"] == "starcoder2":
        return bool(raw.get("use_bias", True))
    return bool(raw.get(key, False))


def olmoe_qk_norms(m, a) -> None:
    """OLMoE normalises the whole query (hidden_size wide) and key projection, whatever head_dim says."""
    h = a.hidden_size
    m.norm(("self_attn.q_norm", h), ("self_attn.k_norm", h // a.num_attention_heads * a.num_key_value_heads))


def starcoder2_mlp(m, raw: dict, a) -> None:
    m.linear("mlp.c_fc", a.hidden_size, a.intermediate_size, uses_bias(raw, "use_bias"))
    m.linear("mlp.c_proj", a.intermediate_size, a.hidden_size, uses_bias(raw, "use_bias"))


def lm_head_tensors(raw: dict, lm_head: int, vocab: int) -> List[int]:
    """The untied lm_head: its weight, and phimoe's bias when lm_head_bias is set."""
    bias = raw.get("model_type") == "phimoe" and bool(raw.get("lm_head_bias"))
    return [lm_head] + ([vocab] if bias else [])
