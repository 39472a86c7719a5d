"""Qwen3-Next, as transformers 5 writes it: most layers are Gated DeltaNet linear attention (fused qkvz and ba
projections, a depthwise causal conv1d, per-value-head dt_bias and A_log, a gated RMSNorm over one value head, an
out_proj), every full_attention_interval-th layer is gated attention (q_proj twice as wide for the output gate,
QK-norm per head), and the MLPs are Qwen2-MoE's (router, fused experts, a gated shared expert).
tests/unit/test_model_families.py holds it to a meta-device count.
"""
HYBRID_DEFAULTS = {
    "qwen3_next": {"head_dim": 256, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
                   "shared_expert_intermediate_size": 512, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                   "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                   "full_attention_interval": 4},
}


def setting(raw: dict, key: str):
    value = raw.get(key)
    return HYBRID_DEFAULTS["qwen3_next"][key] if value is None else value


def is_linear_attention(raw: dict, i: int) -> bool:
    """The config's layer_types, else transformers' default: full attention every full_attention_interval-th layer."""
    if raw.get("model_type") != "qwen3_next":
        return False
    if raw.get("layer_types"):
        return raw["layer_types"][i] == "linear_attention"
    return bool((i + 1) % setting(raw, "full_attention_interval"))


def gated_delta_net(m, raw: dict, a) -> None:
    h, nk, nv = a.hidden_size, setting(raw, "linear_num_key_heads"), setting(raw, "linear_num_value_heads")
    key_dim, dv = nk * setting(raw, "linear_key_head_dim"), setting(raw, "linear_value_head_dim")
    value_dim = nv * dv
    m.tensors["linear_attn"] = [nv, nv]  # dt_bias and A_log
    m.tensors["linear_attn.conv1d"] = [(2 * key_dim + value_dim) * setting(raw, "linear_conv_kernel_dim")]
    m.linear("linear_attn.in_proj_qkvz", h, 2 * key_dim + 2 * value_dim)
    m.linear("linear_attn.in_proj_ba", h, 2 * nv)
    m.norm(("linear_attn.norm", dv))
    m.linear("linear_attn.out_proj", value_dim, h)
