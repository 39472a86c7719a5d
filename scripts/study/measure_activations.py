"""Measure activation bytes of the shipped model families on CPU, from what autograd saves.

    .venv/bin/python scripts/study/measure_activations.py          # table of fitted coefficients (about 30 s)
    .venv/bin/python scripts/study/measure_activations.py --json   # the same as JSON

For small random-init models (Llama, Mistral, Qwen2 are measured; each in bf16 and fp32) one forward with labels
runs under `saved_tensors_hooks`: every saved tensor's storage is counted once, parameters excluded, and charged to
the decoder layer that saved it. Attention goes through SDPA with a causal mask and no padding, the path that saves
only q, k, v, the output and the log-sum-exp (no a·s² matrix), as flash/efficient kernels do on GPU.
Bytes per token per layer are fitted, exactly and in integers, to
    c_h·h + c_f·f + c_q·(a·d) + c_kv·(kv·d) + c_a·a + c_1      (d: head_dim, varied apart from h/a on purpose)
With gradient checkpointing the same count gives the bytes each layer keeps (its input).

LoRA (`--lora`, about 2 minutes): the same count on peft.get_peft_model of the built model, adapters in the model's
dtype (DeepSpeed casts every parameter to the training dtype; TRL passes autocast_adapter_dtype=False under ZeRO-3)
and the embedding output requiring grad (TRL's enable_input_require_grads), so every layer saves what the last one
does. Fitted with r as a seventh unknown for the frozen base (no targets), each single target module and the two
common target sets, with dropout > 0 and = 0; a set is additive when its fit equals the frozen base plus the sum of
its single targets' deltas.

The logits/loss term is a peak, not a saved set. TRL's SFTTrainer never materialises the (tokens × vocab) logits:
its fused LM head (trl/kernels/chunked_logprob.py) scores tiles of 4096 tokens × 32768 vocabulary entries and
accumulates the lm_head gradient in fp32. The live bytes of every storage that head creates in forward and backward
are tracked with a dispatch mode and storage weak references, and fitted the same way.

trl_ds/plan/memory.py holds the results as constants; tests/unit/plan/test_estimate.py re-measures one shape per
dtype with these functions and pins the constants.

Every family the planner counts fast (`--family [MODEL_TYPE ...]`, about 20 s a family): each kind of layer (dense,
moe, a sliding-window layer whose mask reaches attention) is fitted on its own features
(trl_ds.plan.saved_activations.features: QK-norm's kv heads, MLA's ranks and rope/nope widths, experts, top-k and
expert widths, per-layer terms such as Gemma's fp32 norm weights), over 24 sampled shapes with transformers' default
attention and experts implementation; saved_activations.COEFFICIENTS holds the results and
tests/unit/plan/test_family_activations.py re-measures them.

    .venv/bin/python scripts/study/measure_activations.py --lora   # the LoRA tables and the additivity check

Paired trainers (`--paired`, a few seconds): DPO and the reward trainer put a micro-batch of b pairs through the model
as one batch of 2b sequences (chosen, then rejected: trl/trainer/dpo_trainer.py and reward_trainer.py collators).
The same per-layer count runs on a causal LM (DPO's policy) and on AutoModelForSequenceClassification(num_labels=1)
(the reward model) with 2b sequences, beside the SFT count for b; trl_ds/plan/memory.py charges 2b sequences, and
tests/unit/plan/test_plan_trainers.py re-measures it.
"""
import argparse
import json
import sys
from itertools import product

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

FAMILIES = ("llama", "mistral", "qwen2")  # the dense fits of the basis below, kept for the LoRA and checkpointing fits
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# (hidden, ffn, heads, kv heads, head_dim): independent enough for the six unknowns of the fit.
SHAPES = [(64, 160, 4, 2, 16), (128, 160, 4, 2, 32), (64, 320, 4, 2, 16), (64, 160, 8, 2, 8),
          (64, 160, 4, 4, 16), (64, 160, 4, 2, 32), (96, 224, 6, 3, 24)]
UNKNOWNS = ("h", "f", "q", "kv", "heads", "one")
BATCH, SEQ, VOCAB = 2, 32, 1000
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_SETS = {"attention": LINEARS[:4], "all_linears": LINEARS}  # conf/peft/lora.yaml's default, and every linear
LORA_DROPOUTS = (0.05, 0.0)
# SHAPES with a LoRA rank each, varied apart from the dimensions
LORA_SHAPES = [(*shape, r) for shape, r in zip(SHAPES, (8, 8, 8, 8, 8, 8, 16))] + [(64, 160, 4, 2, 16, 4)]
LORA_UNKNOWNS = (*UNKNOWNS, "r")
HEAD_CHUNK = 32768  # trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE, the vocabulary tile SFTTrainer passes


def build(model_type: str, h: int, f: int, a: int, kv: int, d: int, dtype=torch.bfloat16, checkpointing=False,
          classifier=False):
    """A 2-layer model; `classifier`: AutoModelForSequenceClassification(num_labels=1), as the reward trainer loads."""
    config = AutoConfig.for_model(model_type, vocab_size=VOCAB, hidden_size=h, intermediate_size=f,
                                  num_hidden_layers=2, num_attention_heads=a, num_key_value_heads=kv, head_dim=d,
                                  max_position_embeddings=SEQ, attn_implementation="sdpa", use_cache=False,
                                  **({"num_labels": 1, "pad_token_id": 0} if classifier else {}))
    torch.manual_seed(0)
    auto = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM
    model = auto.from_config(config).to(dtype).train()
    if checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


# ---- every family the planner counts fast, each kind of layer: a fit on its own features ------------------------

# (model_type, kind): the layers trl_ds.plan.saved_activations distinguishes. "_sliding": a sliding-window layer whose
# window is shorter than the sequence (its mask reaches attention).
FAMILY_KINDS = (("llama", "dense"), ("mistral", "dense"), ("qwen2", "dense"), ("qwen3", "dense"),
                ("gemma", "dense"), ("gemma2", "dense"), ("gemma2", "dense_sliding"), ("gemma3_text", "dense"),
                ("gemma3_text", "dense_sliding"), ("phi3", "dense"), ("olmo2", "dense"), ("mixtral", "moe"),
                ("qwen2_moe", "moe"), ("qwen3_moe", "moe"), ("deepseek_v3", "dense"),
                ("deepseek_v3", "moe"))
WINDOW = 8  # sliding_window of the "_sliding" kinds: below every sampled sequence length
EXPERT_KEYS = {"mixtral": "num_local_experts", "qwen2_moe": "num_experts", "qwen3_moe": "num_experts",
               "deepseek_v3": "n_routed_experts"}


def sample_config(model_type: str, kind: str, rng) -> tuple:
    """Random small dimensions for one layer of `kind` (both layers of the model are of that kind), batch and
    sequence: (config.json keys, batch, seq). Heads, kv heads, head_dim, widths, experts, top-k, ranks, batch and
    sequence all vary apart."""
    pick = rng.choice
    kv = pick((1, 2, 4))
    group = pick((2, 3) if kv == 1 else (1, 2, 3))  # two heads at least: one head's transposes are no-ops
    raw = {"model_type": model_type, "vocab_size": VOCAB, "hidden_size": pick((48, 72, 96, 144)),
           "intermediate_size": pick((96, 160, 224, 320)), "num_hidden_layers": 2, "num_attention_heads": kv * group,
           "num_key_value_heads": kv, "head_dim": pick((8, 16, 24, 32)), "max_position_embeddings": 64,
           "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if model_type in ("gemma2", "gemma3_text"):
        sliding = kind.endswith("_sliding")
        raw.update(sliding_window=WINDOW, layer_types=["sliding_attention" if sliding else "full_attention"] * 2)
    if kind.startswith("moe"):
        experts = pick((4, 6, 8))
        raw.update({EXPERT_KEYS[model_type]: experts, "num_experts_per_tok": pick((1, 2, 3))})
        raw["moe_intermediate_size"] = pick((32, 48, 64, 96))
        if model_type == "mixtral":
            raw["intermediate_size"] = raw.pop("moe_intermediate_size")
        if model_type == "qwen2_moe":
            raw["shared_expert_intermediate_size"] = pick((32, 64, 96))
    if model_type == "deepseek_v3":
        nope, rope = pick((8, 12, 16)), pick((4, 8))
        # v_head_dim = nope + rope: SDPA's CPU flash kernel needs equal widths (else its math kernel saves a·s²)
        raw.update(num_key_value_heads=raw["num_attention_heads"], q_lora_rank=pick((None, 16, 24, 32)),
                   kv_lora_rank=pick((16, 20, 32)), qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                   v_head_dim=nope + rope, head_dim=rope, first_k_dense_replace=0 if kind == "moe" else 2)
        if kind == "moe":
            groups = pick((1, 2))
            raw.update(n_shared_experts=pick((1, 2)), n_group=groups, topk_group=groups,
                       n_routed_experts=pick((4, 8)))
    return raw, pick((1, 2, 3)), pick((16, 24, 32, 40))


def build_family(raw: dict, dtype, checkpointing: bool = False):
    """The model of a config.json dict, as training builds it: transformers' default attention and experts."""
    kwargs = dict(raw)
    config = AutoConfig.for_model(kwargs.pop("model_type"), use_cache=False, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(dtype).train()
    if checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def saved_by_layer(model, batch: int, seq: int) -> list:
    """Bytes autograd saves in each decoder layer and still holds when forward ends (each storage counted once, in
    the layer that first saves it; parameters and what the model hands every layer, the rotary cos/sin and the mask,
    excluded). Storages are told apart by data_ptr while they live: a branch whose graph forward drops (DeepSeek-V3's
    group-limited routing: topk indices, its mask) frees what it saved, and the allocator hands the address to a later
    tensor, which is a new storage, not one already counted."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    layers = list(model.model.layers)
    current, shared, saved = [None], {}, {}  # saved: data_ptr -> (weak ref, layer or None, bytes)

    def live(table, ptr):
        return ptr in table and not table[ptr][0].expired()

    def enter(i):
        def hook(module, args, kwargs):
            current[0] = i
            handed = tree_flatten((args[1:], {k: v for k, v in kwargs.items() if k != "hidden_states"}))[0]
            shared.update({t.untyped_storage().data_ptr(): (StorageWeakRef(t.untyped_storage()),)
                           for t in handed if isinstance(t, torch.Tensor)})
        return hook

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and not live(shared, ptr) and not live(saved, ptr):
            saved[ptr] = (StorageWeakRef(storage), current[0], storage.nbytes())
        return t

    hooks = [layer.register_forward_pre_hook(enter(i), with_kwargs=True) for i, layer in enumerate(layers)]
    hooks.append(model.model.norm.register_forward_pre_hook(lambda m, args: current.__setitem__(0, None)))
    ids = torch.randint(0, VOCAB, (batch, seq))
    labels = {"labels": ids} if hasattr(model, "lm_head") else {}  # a reward model's output holds its graph
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), **labels)
        loss = out.loss if labels else out.logits  # holds the graph
    for hook in hooks:
        hook.remove()
    totals = [0] * len(layers)
    for ref, layer, nbytes in saved.values():
        if layer is not None and not ref.expired():
            totals[layer] += nbytes
    del loss
    return totals


def family_design(model_type: str, kind: str, samples: int = 0, seed: int = 0) -> list:
    """Sampled (config.json dict, batch, seq) for one family's kind of layer."""
    import random

    rng = random.Random(f"{model_type}/{kind}/{seed}")
    return [sample_config(model_type, kind, rng) for _ in range(samples or 24)]


def family_row(raw: dict, batch: int, seq: int, kind: str) -> dict:
    """The fit's row for one sample: tokens × per-token features, and the per-layer features."""
    from trl_ds.plan.params import from_config
    from trl_ds.plan.saved_activations import features

    token, layer = features(from_config(raw, "measure_activations"), seq, kind, batch)
    return {**{f"token:{k}": batch * seq * v for k, v in token.items()}, **{f"layer:{k}": v for k, v in layer.items()}}


def measure_family(model_type: str, kind: str, dtype, samples: int = 0) -> dict:
    """Fit the last layer's saved bytes over sampled shapes: exact integers, per token and per layer."""
    design = family_design(model_type, kind, samples)
    rows = [family_row(raw, batch, seq, kind) for raw, batch, seq in design]
    unknowns = [k for k in rows[0] if any(row[k] for row in rows)]
    matrix = [[row[k] for k in unknowns] for row in rows]
    rank = int(torch.linalg.matrix_rank(torch.tensor(matrix, dtype=torch.float64)))
    targets = [saved_by_layer(build_family(raw, dtype), batch, seq)[-1] for raw, batch, seq in design]
    fitted, residual = fit_integers(matrix, targets, unknowns)
    split = {part: {k.split(":")[1]: c for k, c in fitted.items() if k.startswith(part + ":") and c}
             for part in ("token", "layer")}
    return {"coefficients": split, "fit_residual_bytes": residual, "unknowns": len(unknowns), "rank": rank}


def with_lora(model, r: int, targets, dropout: float):
    """The base frozen, adapters on `targets` (none: the frozen base alone), the input requiring grad."""
    if targets:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=r, lora_alpha=16, lora_dropout=dropout,
                                                 target_modules=list(targets)), autocast_adapter_dtype=False)
    else:
        model.requires_grad_(False)
    model.enable_input_require_grads()
    return model


def saved_per_layer_token(model, batch: int = BATCH, seq: int = SEQ) -> float:
    """Bytes autograd saves in the last decoder layer per token (the first also holds the shared rotary cos/sin)."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PeftModel wraps the model
    last, final_norm = base.model.layers[-1], base.model.norm
    seen, inside, total = set(), [False], [0]

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in param_ptrs and ptr not in seen:
            seen.add(ptr)
            total[0] += t.untyped_storage().nbytes() if inside[0] else 0
        return t

    hooks = [last.register_forward_pre_hook(lambda m, args: inside.__setitem__(0, True)),
             final_norm.register_forward_pre_hook(lambda m, args: inside.__setitem__(0, False))]
    ids = torch.randint(0, VOCAB, (batch, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
    for hook in hooks:
        hook.remove()
    return total[0] / (batch * seq)


class LiveBytes(TorchDispatchMode):
    """Peak bytes of the storages created inside the mode that are still alive, checked after every op."""

    def __init__(self):
        super().__init__()
        self.live, self.peak = {}, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                self.live[storage.data_ptr()] = (StorageWeakRef(storage), storage.nbytes())
        self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
        self.peak = max(self.peak, sum(nbytes for _, nbytes in self.live.values()))
        return out


def fused_head_peak(dtype, tokens: int, vocab: int, hidden: int, frozen: bool = False) -> int:
    """Peak live bytes of TRL's fused LM head (SFTTrainer's loss: chunked log-probs, no full logits), forward and
    backward, for `tokens` positions; the hidden states and the lm_head weight themselves are not counted. A frozen
    lm_head (LoRA) gets no weight gradient."""
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction

    weight = torch.randn(vocab, hidden, dtype=dtype, requires_grad=not frozen)
    states = torch.randn(tokens, hidden, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,))
    with LiveBytes() as live:
        log_probs = ChunkedLogProbFunction.apply(states, weight, None, targets, 1.0, HEAD_CHUNK, None, 1.0,
                                                 ("log_probs", "entropy", "is_top1"))[0]
        (-log_probs.sum()).backward()
    return live.peak


def measure_head(dtype, frozen: bool = False) -> dict:
    """Fit the fused head's peak, for tokens below TRL's 4096-token tile and vocabularies below its chunk, to
    c_NV·N·V + c_Vh·V·h + c_Nh·N·h + c_N·N + c_1 (c_NV: CPU-only temporaries; Triton works in place on GPU)."""
    rows, targets = [], []
    for n, v, h in product((64, 96, 160), (1000, 1700, 2600), (32, 48, 80)):
        rows.append([n * v, v * h, n * h, n, 1])
        targets.append(fused_head_peak(dtype, n, v, h, frozen))
    coefficients, residual = fit_integers(rows, targets, ("tokens_x_vocab", "vocab_x_hidden", "tokens_x_hidden",
                                                          "tokens", "one"))
    return {"head_bytes": coefficients, "fit_residual_bytes": residual}


def fit_integers(rows, targets, unknowns=UNKNOWNS):
    matrix = torch.tensor(rows, dtype=torch.float64)
    scale = matrix.abs().amax(dim=0).clamp(min=1)  # columns of one magnitude: a well-conditioned solve
    solution = torch.linalg.lstsq(matrix / scale, torch.tensor(targets, dtype=torch.float64).unsqueeze(1),
                                  driver="gelsd").solution.squeeze(1) / scale
    coefficients = [round(x) for x in solution.tolist()]
    residual = max(abs(sum(c * x for c, x in zip(coefficients, row)) - t) for row, t in zip(rows, targets))
    return dict(zip(unknowns, coefficients)), residual


def measure(model_type: str, dtype, checkpointing: bool = False) -> dict:
    rows, targets = [], []
    for h, f, a, kv, d in SHAPES:
        rows.append([h, f, a * d, kv * d, a, 1])
        targets.append(saved_per_layer_token(build(model_type, h, f, a, kv, d, dtype, checkpointing)))
    coefficients, residual = fit_integers(rows, targets)
    return {"layer_bytes_per_token": coefficients, "fit_residual_bytes": residual}


def measure_lora(dtype, targets, dropout: float, checkpointing: bool = False) -> dict:
    """Fit one target set's saved bytes per layer per token over LORA_SHAPES, r being the seventh unknown."""
    rows, measured = [], []
    for h, f, a, kv, d, r in LORA_SHAPES:
        rows.append([h, f, a * d, kv * d, a, 1, r])
        model = with_lora(build("llama", h, f, a, kv, d, dtype, checkpointing), r, targets, dropout)
        measured.append(saved_per_layer_token(model))
    coefficients, residual = fit_integers(rows, measured, LORA_UNKNOWNS)
    return {"layer_bytes_per_token": coefficients, "fit_residual_bytes": residual}


def minus(fit: dict, base: dict) -> dict:
    """A fit less the frozen base's: one target's delta (its residual stays its own fit's)."""
    delta = {k: c - base["layer_bytes_per_token"][k] for k, c in fit["layer_bytes_per_token"].items()}
    return {**fit, "layer_bytes_per_token": delta}


def measure_lora_sets(dtype) -> dict:
    """Per dropout: the frozen base, each single target's delta, each common set's fit and whether it is the frozen
    base plus its targets' deltas; the checkpointed attention set and the fused head with a frozen lm_head."""
    out = {}
    for dropout in LORA_DROPOUTS:
        base = measure_lora(dtype, (), dropout)
        deltas = {t: minus(measure_lora(dtype, (t,), dropout), base) for t in LINEARS}
        out[f"dropout={dropout} frozen_base"] = base
        out.update({f"dropout={dropout} +{t}": d for t, d in deltas.items()})
        for name, targets in LORA_SETS.items():
            fitted = measure_lora(dtype, targets, dropout)
            summed = {k: c + sum(deltas[t]["layer_bytes_per_token"][k] for t in targets)
                      for k, c in base["layer_bytes_per_token"].items()}
            out[f"dropout={dropout} {name}"] = {**fitted, "additive": fitted["layer_bytes_per_token"] == summed}
    out["checkpointed"] = measure_lora(dtype, LORA_SETS["attention"], LORA_DROPOUTS[0], checkpointing=True)
    out["fused_head_frozen"] = measure_head(dtype, frozen=True)
    return out


def measure_paired(dtype, pairs: int = 1) -> dict:
    """Bytes the decoder layers save for `pairs` pairs (2 × pairs sequences) in DPO's policy and the reward model,
    and for `pairs` SFT sequences, one shape of the basis."""
    shape = SHAPES[-1]
    causal, classifier = build("llama", *shape, dtype=dtype), build("llama", *shape, dtype=dtype, classifier=True)
    return {"sft": sum(saved_by_layer(causal, pairs, SEQ)), "dpo": sum(saved_by_layer(causal, 2 * pairs, SEQ)),
            "reward": sum(saved_by_layer(classifier, 2 * pairs, SEQ)), "shape": shape, "seq": SEQ, "pairs": pairs}


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--lora", action="store_true", help="measure LoRA (frozen base + adapters) instead")
    parser.add_argument("--paired", action="store_true", help="measure DPO's and the reward model's paired batches")
    parser.add_argument("--family", nargs="*", metavar="MODEL_TYPE",
                        help="fit these families' layers (all of FAMILY_KINDS when none is named) instead")
    args = parser.parse_args(argv)
    if args.family is not None:
        return print_families(args.family, args.json)
    if args.paired:
        paired = {name: measure_paired(dtype) for name, dtype in DTYPES.items()}
        print(json.dumps(paired, indent=2) if args.json else "\n".join(
            f"{name}: decoder layers save {r['sft']} B for 1 SFT sequence, {r['dpo']} B for 1 DPO pair, "
            f"{r['reward']} B for 1 reward pair (shape {r['shape']}, {r['seq']} tokens)" for name, r in paired.items()))
        return 0
    results = {name: measure_lora_sets(dtype) if args.lora else
               {"fused_head": measure_head(dtype), **{family: measure(family, dtype) for family in FAMILIES},
                "checkpointed": measure("llama", dtype, checkpointing=True)}
               for name, dtype in DTYPES.items()}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"bytes (per layer: per token, batch {BATCH}, sequence {SEQ}; SDPA causal, no padding):")
    for name, by_part in results.items():
        print(f"  {name}:")
        for part, r in by_part.items():
            terms = " + ".join(f"{c}·{k}" for k, c in next(iter(r.values())).items() if c)
            additive = "" if "additive" not in r else f", additive: {'yes' if r['additive'] else 'no'}"
            print(f"    {part:12s} {terms}   (fit residual {r['fit_residual_bytes']:.2g} B{additive})")
    return 0


def print_families(names, as_json: bool) -> int:
    kinds = [(t, k) for t, k in FAMILY_KINDS if not names or t in names]
    results = {f"{t} {k}": {name: measure_family(t, k, dtype) for name, dtype in DTYPES.items()} for t, k in kinds}
    if as_json:
        print(json.dumps(results, indent=2))
        return 0
    print("bytes one layer saves: tokens x (per-token terms) + per-layer terms (SDPA, no padding; Gemma-2 eager)")
    for name, by_dtype in results.items():
        for dtype_name, r in by_dtype.items():
            c = r["coefficients"]
            token = " + ".join(f"{v}·{k}" for k, v in c["token"].items())
            layer = " + ".join(f"{v}·{k}" for k, v in c["layer"].items()) or "0"
            print(f"  {name:26s} {dtype_name}: tokens·({token}) + {layer}   (fit residual "
                  f"{r['fit_residual_bytes']:.2g} B, rank {r['rank']}/{r['unknowns']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
