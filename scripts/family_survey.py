"""Which model_types transformers builds as causal LMs have the modules of a family trl_ds counts from its config.

    nice -n 19 .venv/bin/python scripts/family_survey.py                 # all of them (minutes), writes both files
    nice -n 19 .venv/bin/python scripts/family_survey.py stablelm cohere # those only, prints, writes nothing

For every model_type in transformers' MODEL_FOR_CAUSAL_LM_MAPPING_NAMES that trl_ds does not write out, a small
variant of its default config (vocab 320, hidden 64, 8 heads, 2 kv heads, 4 layers, 4 experts of width 32) is built
on the meta device, and so are its variants: tied embeddings flipped, every boolean key flipped (attention_bias,
mlp_bias and the family's other switches), every small integer key raised by one (shared experts, dense layers,
sparse steps), kv heads equal to the heads and 1, 5 layers, another head_dim. A model_type is an alias of family F
when, for every variant that builds, trl_ds's count of the config.json save_pretrained would write (the diff against
the defaults), read as F's modules with the model_type's own key names and defaults (more_families.family_view),
equals the meta device's total, largest module (ZeRO-3's L_max: the parameters one module holds directly) and
active parameters. Writes tests/data/family_survey.json (every model_type: its family or none, the meta counts of
the variants that tell it apart, the transformers version) and trl_ds/plan/surveyed_aliases.py (the aliases).
"""
import dataclasses
import json
import pprint
import signal
import sys
import warnings
from itertools import product
from pathlib import Path

import torch
import transformers
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from trl_ds.config.model_source import DIM_KEYS
from trl_ds.plan import more_families, params

ROOT = Path(__file__).resolve().parent.parent
DATA, MODULE = ROOT / "tests/data/family_survey.json", ROOT / "trl_ds/plan/surveyed_aliases.py"
SMALL = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4, "num_local_experts": 4,
         "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
         "shared_expert_intermediate_size": 40, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
RESHAPES = {"kv heads = heads": {"num_key_value_heads": 8}, "one kv head": {"num_key_value_heads": 1},
            "5 layers": {"num_hidden_layers": 5}, "head_dim 12": {"head_dim": 12}}
NOT_SWITCHES = {"use_cache", "return_dict", "output_hidden_states", "output_attentions", "torchscript", "is_decoder",
                "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward",
                "use_return_dict", "output_router_logits", "_attn_implementation_autoset", "is_composition"}
# the keys trl_ds's families read: the ones they hold defaults for, and those read with a default written inline
READ_KEYS = set(DIM_KEYS) | set(params.COMMON_DEFAULTS) | {k for d in params.DEFAULTS.values() for k in d} | {
    "head_dim", "num_key_value_heads", "tie_word_embeddings", "attention_bias", "mlp_bias", "layer_types",
    "n_inner", "ffn_hidden_size", "num_kv_heads", "num_ln_in_parallel_attn", "n_positions", "bias", "use_bias"}
FAMILIES = tuple(t for t in params.FAST_TYPES if t not in more_families.LAYOUT_ALIASES
                 and t not in more_families.SURVEYED)
SECONDS_PER_TYPE = 120


def default_values(cls) -> dict:
    """The default config's values, for the keys whose class default is not None (None: derived when built)."""
    values = cls().to_dict()
    if dataclasses.is_dataclass(cls):
        unset = {f.name for f in dataclasses.fields(cls) if f.default is None}
        values = {k: v for k, v in values.items() if k not in unset}
    return values


def own_name(cls, key: str) -> str:
    return cls.attribute_map.get(key, key)


def small_config(cls, defaults: dict, extra: dict) -> dict:
    """The config's own keys set to the small sizes (only those it has), then the variant's."""
    fields = set(cls().to_dict())
    kwargs = {own_name(cls, k): v for k, v in SMALL.items() if own_name(cls, k) in fields}
    return {**kwargs, **{own_name(cls, k): v for k, v in extra.items()}}


def variants(cls, defaults: dict) -> dict:
    """Variant name -> the keys it changes. Each boolean key flipped, each small integer key raised by one."""
    fields = cls().to_dict()
    out = {"base": {}}
    for key, value in sorted(fields.items()):
        if key in NOT_SWITCHES or key.endswith("_token_id") or key.startswith("output_"):
            continue
        if isinstance(value, bool):
            out[f"{key}={not value}"] = {key: not value}
        elif isinstance(value, int) and 0 <= value <= 16 and key not in {own_name(cls, k) for k in SMALL}:
            out[f"{key}={value + 1}"] = {key: value + 1}
    for name, change in RESHAPES.items():
        if all(own_name(cls, k) in fields for k in change):
            out[name] = change
    return out


def meta_counts(model_type: str, kwargs: dict):
    """The config.json save_pretrained writes for these settings, and its meta-device counts (parameters() skips the
    tied duplicates; L_max is what one module holds directly; active: the experts one token is routed to)."""
    config = CONFIG_MAPPING[model_type](**kwargs)
    written = json.loads(config.to_json_string(use_diff=True))
    written.pop("transformers_version", None)
    rebuilt = AutoConfig.for_model(**written)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(rebuilt)
    total = sum(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    active = total
    if experts:
        count = next((getattr(rebuilt, k) for k in params.EXPERT_COUNT_KEYS if getattr(rebuilt, k, None)), 0)
        per_token = getattr(rebuilt, "num_experts_per_tok", None) or count
        active = total - experts * (count - per_token) // count if count else None
    return written, {"total": total, "largest": largest, "active": active}, rebuilt


def registration(cls, defaults: dict, family: str):
    """(family, the model_type's key names -> the family's, its defaults where the family's differ), or None where
    a key the family reads has no default in the model_type's class but one in the family (it would be wrong)."""
    names = {v: k for k, v in cls.attribute_map.items() if k in READ_KEYS and v not in READ_KEYS}
    fields = set(cls().to_dict())
    wanted = next((k for k in params.EXPERT_COUNT_KEYS if params.get({"model_type": family}, k)), None)
    for synonym in params.EXPERT_COUNT_KEYS:  # the family's name for the routed experts' count
        if wanted and synonym != wanted and synonym in fields and wanted not in fields:
            names[synonym] = wanted
    kept = {}
    for key in sorted(READ_KEYS - set(DIM_KEYS) - set(names)):
        if key in cls.attribute_map and cls.attribute_map[key] not in names:  # another name of a stored key
            continue
        mine = own_name(cls, key)
        family_default = params.get({"model_type": family}, key)
        if mine in fields and mine not in defaults and family_default is not None:
            return None
        if mine in defaults and defaults[mine] != family_default and defaults[mine] is not None:
            kept[key] = defaults[mine]
    return family, names, kept


def fast_counts(written: dict, model_type: str, reg) -> dict:
    """trl_ds's count of the config.json with the model_type registered as `reg` (as surveyed_aliases.py would)."""
    saved, fast_types = dict(more_families.SURVEYED), params.FAST_TYPES
    more_families.SURVEYED[model_type] = reg
    params.FAST_TYPES = fast_types + (model_type,)
    try:
        if any(k not in params.standard_keys(more_families.family_view(written)) for k in DIM_KEYS):
            return {"error": "a dimension is left to its default"}
        counts = params.count_params(params.from_config(dict(written), "survey"))
        if counts.method != "fast":
            return {"error": "counted on the meta device"}
        return {"total": counts.total, "largest": counts.largest_module, "active": counts.active}
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError) as err:
        return {"error": f"{type(err).__name__}: {err}"}
    finally:
        more_families.SURVEYED.clear()
        more_families.SURVEYED.update(saved)
        params.FAST_TYPES = fast_types


class TooSlow(Exception):
    pass


def built_variants(model_type: str, cls, defaults: dict):
    """(variant name, config.json as written, meta counts) of each variant transformers builds; base first."""
    for name, change in variants(cls, defaults).items():
        try:
            written, meta, _ = meta_counts(model_type, small_config(cls, defaults, change))
        except TooSlow:
            raise
        except Exception as err:  # noqa: BLE001 - a variant transformers refuses is no evidence either way
            if name == "base":
                raise RuntimeError(f"does not build: {type(err).__name__}: {str(err)[:160]}") from None
            continue
        yield name, written, meta


def first_miss(rows, model_type: str, reg):
    """The first variant whose count under `reg` differs from the meta device's, else None."""
    for name, written, meta in rows:
        got = fast_counts(written, model_type, reg)
        if {k: got.get(k) for k in meta} != meta:
            return name
    return None


def bias_plans(cls, defaults: dict):
    """Which of the config's bias switches turns on the biases of q/k/v, of o_proj and of the MLP's Linears."""
    keys = [None] + sorted(k for k, v in cls().to_dict().items() if isinstance(v, bool) and "bias" in k)
    for qkv, out, mlp in product(keys, repeat=3):
        yield {g: k for g, k in (("qkv", qkv), ("o", out), ("mlp", mlp))}


def survey(model_type: str) -> dict:
    cls = CONFIG_MAPPING[model_type]
    if cls.model_type != model_type:  # its config.json names the other model_type
        return {"family": None, "same_config_as": cls.model_type}
    defaults = default_values(cls)
    config = cls(**small_config(cls, defaults, {}))
    if config.get_text_config() is not config or getattr(config, "hidden_size", None) != SMALL["hidden_size"]:
        return {"family": None, "why": "composite or not shrinkable: its text model's sizes are not top-level keys"}
    rows = built_variants(model_type, cls, defaults)
    try:
        rows = [next(rows)]
    except RuntimeError as err:
        return {"family": None, "why": str(err)}
    regs = {f: registration(cls, defaults, f) for f in FAMILIES}
    regs = {f: r for f, r in regs.items() if r is not None and first_miss(rows, model_type, r) is None}
    base = {"variant": "base", "config": rows[0][1], **rows[0][2]}
    if not regs:
        return {"family": None, "variants": [base]}
    rows += list(rows_left(rows, model_type, cls, defaults))
    near = {}
    for family, reg in regs.items():  # the first family written out whose modules hold under every variant
        near[family] = first_miss(rows, model_type, reg)
        if near[family] is None:
            return matched(family, reg, rows)
    for family, reg in regs.items():  # the family's modules with the biases switched by the config's own keys
        for plan in bias_plans(cls, defaults):
            planned = (*reg[:2], {**reg[2], **bias_defaults(plan, defaults)}, plan)
            if first_miss(rows, model_type, planned) is None:
                return matched(family, planned, rows)
    return {"family": None, "variants": [base], "near": near}


def rows_left(rows, model_type, cls, defaults):
    return list(built_variants(model_type, cls, defaults))[1:]


def bias_defaults(plan: dict, defaults: dict) -> dict:
    return {k: defaults[k] for k in plan.values() if k and k in defaults}


def matched(family: str, reg, rows) -> dict:
    """The alias's record: its registration, and the variants whose counts differ (the others repeat one)."""
    seen, kept = set(), []
    for name, written, meta in rows:
        if (meta["total"], meta["largest"]) not in seen or name == "base":
            seen.add((meta["total"], meta["largest"]))
            kept.append({"variant": name, "config": written, **meta})
    registration_ = {"names": reg[1], "defaults": reg[2]}
    if len(reg) > 3:
        registration_["biases"] = {g: k for g, k in reg[3].items() if k}
    return {"family": family, "registration": registration_, "variants": kept}


def on_alarm(signum, frame):
    raise TooSlow()


def write_module(results: dict) -> None:
    aliases = {}
    for model_type, r in sorted(results.items()):
        if r.get("family"):
            reg = r["registration"]
            aliases[model_type] = (r["family"], reg["names"], reg["defaults"]) + ((reg["biases"],) if "biases" in reg
                                                                                 else ())
    MODULE.write_text(
        '"""Written by scripts/family_survey.py: do not edit. model_type -> (family, {its config key: the family\'s '
        'key},\n{key: the model_type\'s default where the family\'s differs}[, {"qkv" | "o" | "mlp": the key that '
        'switches those\nbiases}]); tests/data/family_survey.json holds the meta-device counts that make each one an '
        'alias.\n"""\n'
        f'SURVEYED_WITH = "{transformers.__version__}"  # the transformers version the survey ran with\n'
        f"SURVEYED = {pprint.pformat(aliases, width=116, sort_dicts=True)}\n")


def main(argv) -> None:
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    signal.signal(signal.SIGALRM, on_alarm)
    written_out = set(params.FAST_TYPES) - set(more_families.SURVEYED)
    todo = argv or sorted(t for t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if t not in written_out)
    results = {}
    for model_type in todo:
        signal.alarm(SECONDS_PER_TYPE)
        try:
            results[model_type] = survey(model_type)
        except TooSlow:
            results[model_type] = {"family": None, "why": f"took over {SECONDS_PER_TYPE} s"}
        except Exception as err:  # noqa: BLE001 - one model_type's surprise must not end the survey
            results[model_type] = {"family": None, "why": f"{type(err).__name__}: {str(err)[:160]}"}
        finally:
            signal.alarm(0)
        r = results[model_type]
        note = r.get("why") or r.get("same_config_as") or r.get("near") or ""
        print(f"{model_type:32} {r.get('family') or '-':14} {note}", flush=True)
    matched = sorted(t for t, r in results.items() if r.get("family"))
    print(f"{len(matched)} of {len(results)} model_types are a family's modules: {', '.join(matched)}")
    if argv:
        return
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps({"transformers": transformers.__version__, "families": list(FAMILIES),
                                "written_out": sorted(written_out), "model_types": results}, indent=1) + "\n")
    write_module(results)


if __name__ == "__main__":
    main(sys.argv[1:])
