"""Torch-free exact counts of the model_types params.py does not write out, from shape templates that
scripts/shape_survey.py learned on the meta device (shape_templates.json beside this file).

A template holds each parameter tensor of the model as a name pattern (layer and expert indices as `*`), its number of
instances and each dimension, all as small integer formulas of the config's keys ("variables": ints, booleans as 0/1,
counts of a list's items such as layer_types). A variable missing from the config.json takes transformers' default,
or the formula transformers derives it by (head_dim from hidden_size // num_attention_heads). The survey kept only
templates that reproduced the meta device's counts on configs it did not learn from (tests/data/shape_survey.json).

A field an older config.json carries is read as the config class reads it: an alias the class takes for a field
(LFM2's block_ff_dim for intermediate_size) as that field, and one no code of the model reads (LFM2's conv_dim) not at
all. Returns None, and the model is counted on the meta device as before, where the survey cannot vouch for the
config: another transformers version, a key the template does not know that the model's code reads, or a setting
held fixed in the survey (a string, a float or a list that changed the shapes, or one the survey could not vary) that
differs from transformers' default.
"""
import json
import re
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Dict, List, Optional, Tuple

DATA = Path(__file__).with_name("shape_templates.json")
# keys that never shape a parameter and that configs carry for other readers
IGNORED = ("architectures", "auto_map", "transformers_version", "_name_or_path", "torch_dtype", "dtype",
           "id2label", "label2id", "task_specific_params", "quantization_config", "model_type")
# settings that never hold parameters, under whatever name a config of an older version carries them (rope_theta,
# rope_scaling, resid_pdrop, layer_norm_epsilon, ...; summary_* feed only the double-heads models' classifier)
HARMLESS = re.compile(r"(^|[._])(rope|rotary|dropout|pdrop|eps|epsilon|initializer|init|attn_implementation|"
                      r"use_cache|token_id|logit|scale|softcap|temperature|summary)")


@lru_cache(maxsize=1)
def survey() -> dict:
    """The survey's file, when it ran with the installed transformers (else empty)."""
    try:
        data = json.loads(DATA.read_text())
        installed = version("transformers")
    except (OSError, ValueError, PackageNotFoundError):
        return {}
    return data if data.get("transformers") == installed else {}


def templates() -> dict:
    """model_type -> its template."""
    return survey().setdefault("types", {})


def unread(tpl: dict, key: str, value) -> bool:
    """Whether no code that builds the model reads this key (a field only an older config.json carries, such as
    LFM2's conv_dim): not among the config attributes the model's own source files read, as the survey found them,
    nor, unless it is None (Jamba 1.5's sliding_window), among those transformers' shared modeling code reads."""
    name = key.split(".")[-1]
    return "reads" in tpl and name not in tpl["reads"] and all(k.split(".")[-1] != name for k in tpl["keys"]) and (
        value is None or name not in survey().get("shared_reads", ()))  # text_config.hidden_size: read as hidden_size


def with_aliases(raw: dict, tpl: dict) -> dict:
    """An older name the config class takes in place of a field (LFM2's block_ff_dim for intermediate_size), under
    the field's name; it wins over the field, as the class's kwargs.pop(alias, field) does."""
    out = dict(raw)
    for alias, field in tpl.get("aliases", {}).items():
        if alias in out:
            out[field] = out.pop(alias)
    for alias, (field, kinds) in tpl.get("patterns", {}).items():  # nemotron_h's hybrid_override_pattern: a
        # character a layer, converted where the list itself is not given
        names = {field} | {a for a, real in tpl["attribute_map"].items() if real == field}
        if isinstance(out.get(alias), str) and set(out[alias]) <= set(kinds) and not names & set(out):
            out[field] = [kinds[c] for c in out.pop(alias)]
    return out


def flatten(raw: dict, prefix: str = "") -> Dict[str, object]:
    """Nested sub-configs as dotted keys (text_config.hidden_size); lists and scalars as leaves."""
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def list_variable(items: list, item: str, layers=None) -> Optional[int]:
    """`key#len`: the list's length; `key#<json item>`: how many of its items are that one; `key#<json item>%`: how
    many of the layers have it, the list repeated over them (recurrent_gemma's block_types); `key#in`: how many
    layers a list of layer indices names (llama4's moe_layers: each index below the layer count, once); `key#all`: the
    size every layer's entry gives (gemma3n's intermediate_size, one per layer), unknown where they differ."""
    if item == "len":
        return len(items)
    if item == "all":
        sizes = set(map(json.dumps, items))
        return items[0] if len(sizes) == 1 and type(items[0]) is int else None
    if item == "in":
        return len({x for x in items if type(x) is int and 0 <= x < layers}) if isinstance(layers, int) else None
    if item.endswith("%"):
        if not isinstance(layers, int) or not items:
            return None
        items = repeated(items, layers)
        item = item[:-1]
    return sum(1 for x in items if json.dumps(x) == item)


def repeated(pattern: list, layers: int) -> list:
    """A pattern of kinds repeated over the layers, cut at their count."""
    return (pattern * (layers // len(pattern) + 1))[:layers]


def layer_count(flat: dict, key: str):
    """num_hidden_layers beside the key (text_config.num_hidden_layers for text_config.block_types)."""
    return flat.get(layer_key(key))


def layer_key(key: str) -> str:
    prefix = key.rpartition(".")[0]
    return f"{prefix}.num_hidden_layers" if prefix else "num_hidden_layers"


def given(flat: dict, name: str, attribute_map: dict):
    """A variable's value in the config.json, under its own key or another name the attribute_map gives it."""
    key, _, item = name.partition("#")
    value = flat.get(key)
    if value is None:
        value = next((flat[a] for a, real in attribute_map.items() if real == key and flat.get(a) is not None), None)
    if item == "set":  # 1 where the key is set, 0 where the config says None, unknown where it leaves it out
        return 1 if value is not None else 0 if key in flat else None
    if item == "nz":  # 1 where the size is not 0
        return int(value != 0) if isinstance(value, int) else None
    if item == "all" and type(value) is int:  # one size for every layer
        return value
    if item:
        return list_variable(value, item, layer_count(flat, key)) if isinstance(value, list) else None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None


def term_value(term: list, v: Dict[str, int]) -> int:
    """("p", a, b...): a product (empty: 1); ("f", [[coef, name]...], const, divisor): floor of the sum over the
    divisor (a variable or a number); ("m", a, b): the smaller; ("ne", a, b): 1 where they differ, else 0;
    ("q", a, b): (a // b) ** 2; ("pf", a, b, c): a * (b // c); ("pd", a, b, c): a * b // c;
    ("k", a, b, c): how many i < a have i % b == c (jamba's attention layers: every b-th from the c-th);
    ("x", s, term): the term where the switch s is on, else 0; ("u", a, m, n, d): n * a // d rounded up to a multiple
    of m (LLaMA's FFN width: 2/3 of a, to a multiple of multiple_of); ("w", a, s, e, k): how many of layers s to e
    (an e below 0: to the last of a layers) have (i + 1) % k == 0 (ERNIE 4.5's MoE layers)."""
    kind = term[0]
    if kind == "p":
        out = 1
        for name in term[1:]:
            out *= v[name]
        return out
    if kind == "f":
        return (sum(c * v[n] for c, n in term[1]) + term[2]) // floor_divisor(term, v)
    if kind == "m":
        return min(v[term[1]], v[term[2]])
    if kind == "ne":
        return int(v[term[1]] != v[term[2]])
    if kind == "q":
        return (v[term[1]] // v[term[2]]) ** 2
    if kind == "x":  # a switch that is off reads nothing else: its key's sizes may be unset
        return v[term[1]] and v[term[1]] * term_value(term[2], v)
    if kind == "k":
        return max(0, (v[term[1]] - v[term[3]] + v[term[2]] - 1) // v[term[2]])
    if kind == "w":
        last = v[term[3]] if 0 <= v[term[3]] < v[term[1]] else v[term[1]] - 1
        return max(0, (last + 1) // v[term[4]] - v[term[2]] // v[term[4]])
    if kind == "u":
        return v[term[2]] * -(-(term[3] * v[term[1]] // term[4]) // v[term[2]])
    if kind == "pd":
        return v[term[1]] * v[term[2]] // v[term[3]]
    return v[term[1]] * (v[term[2]] // v[term[3]])


def floor_divisor(term: list, v: Dict[str, int]) -> int:
    """An ("f", ...) term's divisor: a number, or a variable's value."""
    return term[3] if isinstance(term[3], int) else v[term[3]]


def evaluate(expr: list, v: Dict[str, int]) -> int:
    return sum(coef * term_value(term, v) for coef, term in expr)


def applies(flat: dict, tpl: dict) -> bool:
    """Every key held fixed has the surveyed value, every other key is one the survey knew, one that holds no
    parameters, or one the model's code never reads, and a list of layer kinds holds only kinds the survey built (an
    older name, such as nemotron_h's "mamba" for "linear_attention", would count as no layer of either)."""
    for key, value in flat.items():
        known = tpl.get("kinds", {}).get(tpl["attribute_map"].get(key, key))
        if known is not None and isinstance(value, list) and not set(map(json.dumps, value)) <= set(known):
            return False
        if key in tpl["fixed"]:
            if value != tpl["fixed"][key]:
                return False
        elif key not in tpl["keys"] and key not in tpl.get("derived", {}) and not (
                any(p in IGNORED for p in key.split(".")) or HARMLESS.search(key) or unread(tpl, key, value)):
            return False
    return True


def variables(raw: dict) -> Optional[Tuple[dict, Dict[str, int]]]:
    """(the template, the values of its variables) for a config.json, or None where no template vouches for it."""
    tpl = templates().get(raw.get("model_type"))
    if tpl is None:
        return None
    flat = flatten(with_aliases(raw, tpl))
    if not applies(flat, tpl):
        return None
    values: Dict[str, int] = {}
    for name, rule in sorted(tpl["vars"].items(), key=lambda item: "derived" in item[1]):  # derived ones last
        value = given(flat, name, tpl["attribute_map"])
        key, _, item = name.partition("#")
        if value is None and item not in ("", "set", "nz") and isinstance(flat.get(key), list):
            return None  # a list given that the template cannot read (gemma3n's widths, where layers differ)
        try:
            derived = evaluate(rule["derived"], values) if "derived" in rule else None
        except ZeroDivisionError:
            return None
        if rule.get("check") and value is not None and value != derived:
            return None  # a per-layer list the survey could not vary, unlike the one transformers derives
        value = rule.get("default", derived) if value is None else value
        if value is None and f"{name}#set" in tpl["vars"]:
            continue  # None, which switches off every tensor that reads it (kimi_linear's q_lora_rank)
        if value is None:
            return None
        values[name] = value
    for name, rule in tpl.get("derived", {}).items():  # given beside what the class derives (a hub config's
        # num_hidden_layers beside nemotron_h's pattern): vouched for where the two agree
        if flat.get(name) is not None and (not reads(rule) <= set(values) or flat[name] != evaluate(rule, values)):
            return None
    try:
        if any(remainder(term, values) for term in tpl.get("exact", ()) if reads([[1, term]]) <= set(values)):
            return None  # a size the survey only saw divide evenly (transformers' validators may refuse it)
    except ZeroDivisionError:
        return None
    return tpl, values


def reads(expr: list) -> set:
    """The variables a formula reads."""
    out = set()
    for _, term in expr:
        if term[0] == "x":
            out |= {term[1]} | reads([[1, term[2]]])
        elif term[0] == "f":
            out |= {n for _, n in term[1]} | ({term[3]} if isinstance(term[3], str) else set())
        else:
            out |= {x for x in term[1:] if isinstance(x, str)}
    return out


def remainder(term: list, v: Dict[str, int]) -> int:
    """What a floor division term of term_value's leaves over: ("f", ...), ("pd", a, b, c), ("pf", a, b, c), ("q", a,
    b)."""
    kind = term[0]
    if kind == "f":
        return (sum(c * v[n] for c, n in term[1]) + term[2]) % floor_divisor(term, v)
    if kind == "pd":
        return v[term[1]] * v[term[2]] % v[term[3]]
    if kind == "pf":
        return v[term[2]] % v[term[3]]
    return v[term[1]] % v[term[2]]


def attribute(tpl: dict, values: Dict[str, int], name: str):
    """What getattr(config, name) gives: the attribute_map resolves another name for the same key, and a property of
    the config class (nemotron_h's num_hidden_layers) is its formula."""
    if name in tpl.get("derived", {}):
        return evaluate(tpl["derived"][name], values)
    return values.get(tpl["attribute_map"].get(name, name))


def tensors(tpl: dict, values: Dict[str, int]) -> List[Tuple[str, int, int]]:
    """(pattern, instances, numel of one) of every parameter tensor the model holds."""
    out = []
    for pattern, count, dims in tpl["params"]:
        instances, numel = evaluate(count, values), 1
        for d in dims if instances else ():  # a tensor the config switches off has no dimensions to read
            numel *= evaluate(d, values)
        out.append((pattern, instances, numel))
    return out
