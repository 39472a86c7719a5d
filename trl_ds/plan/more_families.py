"""The families params.py counts from their config beyond its Llama-shaped core, as transformers 5 writes them:
starcoder2 (plain MLP, one use_bias switch, LayerNorm), granite (Llama's layout), olmoe (Mixtral's fused experts
with OLMo's QK-norm over whole projections), phimoe (Mixtral's experts, LayerNorm, an optional lm_head bias),
glm4 (biased q/k/v but not o, phi3's fused gate_up_proj, four norms per layer), glm4_moe (GLM-4's attention with an
optional per-head QK-norm, DeepSeek-V3's dense-then-MoE layers with shared experts) and gpt_oss (biases everywhere,
attention sinks, a biased router, fused experts with biases). The GPT-style families: gpt_families.py. LAYOUT_ALIASES:
families whose modules are another's (their sliding windows, NoPE layers and rope settings hold no parameters),
counted with their own defaults. SURVEYED (trl_ds/plan/surveyed_aliases.py, written by scripts/family_survey.py):
the model_types whose meta-device count equals one family's under every variant the survey built; `family_view`
gives that family's code the config under the family's name, the alias's key names and defaults filled in, and
which of its keys switches the biases of q/k/v, of o_proj and of the MLP where they are not the family's.
Without these the planner builds them on the meta device, which imports torch (seconds, not a fraction of one).
tests/unit/test_model_families.py holds each to a meta-device instantiation, exact to the parameter.
"""
from typing import List

from trl_ds.plan.gpt_families import GPT_DEFAULTS, GPT_TYPES
from trl_ds.plan.surveyed_aliases import SURVEYED

LAYOUT_ALIASES = {"olmo3": "olmo2", "ministral": "mistral", "ministral3": "mistral", "hunyuan_v1_dense": "qwen3",
                  "smollm3": "llama"}
MORE_TYPES = ("starcoder2", "granite", "olmoe", "phimoe", "glm4", "glm4_moe", "gpt_oss") + GPT_TYPES + tuple(
    LAYOUT_ALIASES) + tuple(SURVEYED)
FUSED_EXPERT_TYPES = ("mixtral", "olmoe", "phimoe", "gpt_oss")  # every layer MoE; experts intermediate_size wide
LAYER_NORM_TYPES = ("starcoder2", "phimoe") + GPT_TYPES  # nn.LayerNorm: a weight and a bias
# transformers' defaults for keys a config.json may leave out (configuration_<family>.py)
MORE_DEFAULTS = {
    "starcoder2": {"num_key_value_heads": 2, "use_bias": True, "tie_word_embeddings": True},
    "olmoe": {"num_experts": 64, "num_experts_per_tok": 8},
    "phimoe": {"num_key_value_heads": 8, "num_local_experts": 16, "num_experts_per_tok": 2, "lm_head_bias": False},
    "glm4": {"attention_bias": True},
    "glm4_moe": {"n_routed_experts": 128, "n_shared_experts": 1, "moe_intermediate_size": 1408,
                 "num_experts_per_tok": 8, "first_k_dense_replace": 1, "use_qk_norm": False},
    "gpt_oss": {"num_local_experts": 128, "num_experts_per_tok": 4, "attention_bias": True},
    "ministral": {"num_key_value_heads": 8},
    "ministral3": {"num_key_value_heads": 8, "head_dim": 128},
    "smollm3": {"num_key_value_heads": 4, "tie_word_embeddings": True},
    **GPT_DEFAULTS,
}


def layout_family(model_type: str) -> str:
    """The family whose modules a model_type has (itself for the families written out)."""
    if model_type in SURVEYED:
        return SURVEYED[model_type][0]
    return LAYOUT_ALIASES.get(model_type, model_type)


def family_view(raw: dict) -> dict:
    """A surveyed alias's config as its family's code reads it: the family's model_type, the family's key names
    (the alias's attribute_map), and the alias's own defaults where its config.json leaves a key out."""
    if raw.get("model_type") not in SURVEYED:
        return raw
    family, names, defaults, *biases = SURVEYED[raw["model_type"]]
    out = {names.get(k, k): v for k, v in raw.items()}
    for key, value in defaults.items():
        if out.get(key) is None:
            out[key] = value
    for group in ("qkv", "o", "mlp") if biases else ():  # which of the alias's keys switches each group's biases
        out[f"{group}_bias_on"] = bool(out.get(biases[0].get(group)))
    out["model_type"] = family
    return out


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


def gpt_oss_experts(m, a) -> int:
    """GPT-OSS's MoE block: a router with a bias, and every expert's fused gate_up and down projections with their
    biases in one module. Returns the routed experts' parameters."""
    h, f, experts = a.hidden_size, a.intermediate_size, a.num_experts
    m.tensors["mlp.router"] = [experts * h, experts]
    m.tensors["mlp.experts"] = [experts * h * 2 * f, experts * 2 * f, experts * f * h, experts * h]
    return sum(m.tensors["mlp.experts"])
