"""Learn, on the meta device, the shape templates trl_ds/plan/shape_templates.py counts with, torch-free.

    nice -n 19 .venv/bin/python scripts/shape_survey.py              # every model_type left (minutes), writes both
    nice -n 19 .venv/bin/python scripts/shape_survey.py phi stablelm # those only, prints, writes nothing
    nice -n 19 .venv/bin/python scripts/shape_survey.py --update ernie4_5_moe  # those only, into both files

For each model_type transformers builds as a causal LM and params.py does not write out, a base config (the family
survey's small sizes where the config has those keys; where they do not build, with one of them left at its default)
is built on the meta device, then once per key with that key changed alone (each int raised, each boolean flipped,
each None set, each list reversed or cut, a list of one kind given another kind that the config and modeling code both
name, each float doubled, each activation swapped), once per sizing key left out (to see what transformers derives),
and with random sets of the keys that shaped something changed together. Every parameter tensor becomes a name pattern
(indices as `*`); its count and each dimension is fitted, over all the builds, by the simplest exact integer formula
of at most three terms (products of two keys, floor divisions, a size rounded up to a multiple) of the keys whose
change moved it, or by one formula where a switch is on and another where it is off; a tensor a switch adds is first
tried at another tensor's count. A key left out of a config.json takes the class default, or a formula fitted the
same way. Keys whose change moved shapes that no formula follows (a string, a float, a list of dicts), and keys no
value of which builds, are held at their default: a config that sets another value is counted on the meta device.
The config attributes the model's source files read, and the older names its config class takes for a field, go into
the template too, so that an older config.json's extra fields are read as transformers reads them.

A template is kept only if it reproduces, from the config.json save_pretrained writes, the meta device's total, largest
module, active parameters, embedding and lm_head on every build and on held-out configs of other sizes (another base,
and random sets of changes around it). Writes trl_ds/plan/shape_templates.json and tests/data/shape_survey.json (every
model_type: kept or why not, and the held-out configs with their meta counts, which the tests count again).
"""
import itertools
import json
import multiprocessing
import random
import re
import signal
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from trl_ds.config.model_source import special_floats
from trl_ds.plan import by_hand, params, shape_templates
from trl_ds.plan.params import EXPERT_COUNT_KEYS

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES, DATA = ROOT / "trl_ds/plan/shape_templates.json", ROOT / "tests/data/shape_survey.json"
SMALL = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4, "num_local_experts": 4,
         "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
         "shared_expert_intermediate_size": 40, "mamba_n_heads": 8}
SMALL2 = {"vocab_size": 352, "hidden_size": 96, "intermediate_size": 160, "num_hidden_layers": 6,
          "num_attention_heads": 12, "num_key_value_heads": 4, "head_dim": 8, "num_experts": 6,
          "num_local_experts": 6, "n_routed_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 48,
          "shared_expert_intermediate_size": 56, "mamba_n_heads": 12}
# settings every published config of the type carries and the config class leaves None or out, so that its own
# default config does not build; the bases get them, a variable's default stays the class's
SEEDS = {
    "dbrx": lambda sizes: {"attn_config.rope_theta": 500000.0},  # modeling_dbrx reads it; no field declares it
    "dots1": lambda sizes: {"n_shared_experts": 2},  # dots.llm1's
    "lfm2_moe": lambda sizes: {"layer_types": shape_templates.repeated(LAYER_CYCLES["lfm2_moe"][1],
                                                                       sizes["num_hidden_layers"])},
    "cohere_compass_text": lambda sizes: {f"rope_parameters.{kind}.{k}": v for kind in ("full_attention",
                                          "sliding_attention") for k, v in (("rope_type", "default"),
                                                                            ("rope_theta", 10000.0))},
    "reformer": lambda sizes: {"is_decoder": True},  # its causal LM refuses anything else
    "qwen4_exp_text": lambda sizes: qsa_indexer(sizes, ""),  # its indexed layers always build an indexer
    "qwen4_exp": lambda sizes: qsa_indexer(sizes, "text_config."),
}


# a seeded list with one entry per layer: a row that changes the layer count gets the pattern at its length
LAYER_CYCLES = {"lfm2_moe": ("layer_types", ["conv", "conv", "full_attention"])}


def following_layers(model_type: str, kwargs: dict) -> dict:
    """The kwargs with a seeded per-layer list (LAYER_CYCLES) as long as their layer count, where the list is still
    the seeded pattern (a row that swapped its kinds keeps them)."""
    if model_type not in LAYER_CYCLES:
        return kwargs
    key, pattern = LAYER_CYCLES[model_type]
    items, layers = kwargs.get(key), kwargs.get("num_hidden_layers", CONFIG_MAPPING[model_type]().num_hidden_layers)
    if not isinstance(items, list) or items != shape_templates.repeated(pattern, len(items)):
        return kwargs
    return {**kwargs, key: shape_templates.repeated(pattern, layers)}


def qsa_indexer(sizes: dict, prefix: str) -> dict:
    """Qwen4-Exp's index head must hold the attention's RoPE dims: wide enough for every head_dim the probes try."""
    return {prefix + k: v for k, v in (("indexer_n_heads", 4), ("indexer_kv_heads", 1), ("indexer_budget", 64),
                                       ("indexer_head_dim", 8 * sizes["head_dim"]), ("indexer_compress_ratio", 4))}
NOT_SWITCHES = {"use_cache", "return_dict", "output_hidden_states", "output_attentions", "torchscript",
                "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward",
                "use_return_dict", "output_router_logits", "_attn_implementation_autoset", "is_composition",
                "tie_word_embeddings_when_composite"}
ACTIVATIONS = ("gelu", "silu", "relu")
PATTERN = re.compile(r"\.\d+(?=\.|$)")
RANKED = re.compile(r"\*~\d+")  # a repeated block's larger shapes, as patterns() names them
BY_KIND = {"on": False, "every": False, "parts": set()}  # survey()'s last try: layers named by their kind
SECONDS_PER_TYPE = 240
JOINT, HELD_OUT = 10, 4
MAX_TERMS = 3


class Unsupported(Exception):
    pass


class KindParts(Unsupported):
    """A build showed a part of a layer whose class its kind decides that the builds before it did not."""


# ---- building ------------------------------------------------------------------------------------------------

def unflatten(flat: dict) -> dict:
    out = {}
    for key, value in flat.items():
        target = out
        parts = key.split(".")
        for p in parts[:-1]:
            target = target.setdefault(p, {})
        target[parts[-1]] = value
    return out


def build(model_type: str, kwargs: dict):
    """(config.json as save_pretrained writes it, the rebuilt config's flat values, the meta model)."""
    config = CONFIG_MAPPING[model_type](**unflatten(kwargs))
    written = json.loads(config.to_json_string(use_diff=True), object_hook=special_floats)
    written.pop("transformers_version", None)
    rebuilt = AutoConfig.for_model(**written)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(rebuilt)
    return written, shape_templates.flatten(rebuilt.to_dict()), model


def variables_of(flat: dict) -> dict:
    """Ints, booleans (0/1), and list counts (`key#len`, `key#<item>`, `key#<item>%` where the list is a pattern
    shorter than the layers, `key#in` where it lists layer indices) of a flat config."""
    out = {}
    for key, value in flat.items():
        last = key.split(".")[-1]
        if last in NOT_SWITCHES or last.startswith("output_") or last.endswith("_token_id"):
            continue
        if isinstance(value, bool) or isinstance(value, int):
            out[key] = int(value)
        elif isinstance(value, list) and all(isinstance(x, (str, int, bool)) for x in value):
            out[f"{key}#len"] = len(value)
            layers = shape_templates.layer_count(flat, key)
            cycled = isinstance(layers, int) and value and len(value) != layers  # a pattern, not one per layer
            if value and all(type(x) is int for x in value) and isinstance(layers, int):
                out[f"{key}#in"] = shape_templates.list_variable(value, "in", layers)
                if shape_templates.list_variable(value, "all", layers) is not None:  # one size a layer, all alike
                    out[f"{key}#all"] = value[0]
            for item in {json.dumps(x) for x in value}:
                out[f"{key}#{item}"] = shape_templates.list_variable(value, item)
                if cycled and all(isinstance(x, str) for x in value):
                    out[f"{key}#{item}%"] = shape_templates.list_variable(value, f"{item}%", layers)
    return out


def patterns(model, named) -> dict:
    """name -> pattern: numeric indices as `*`, except where instances under one pattern differ in shape. The
    children of an nn.Sequential keep their last wildcarded index, and so on; the repeated blocks of an nn.ModuleList
    (gemma4's double-wide MLP in its KV-sharing layers) keep the `*` at the smallest shape and become `*~k` at the
    k-th larger one, so a count can follow the config whatever the number of layers. With BY_KIND on, every layer's
    index becomes `*~<its kind in layer_types>`, uneven or not (kimi_linear's attention, whose two kinds' widths
    rank either way)."""
    out = {name: PATTERN.sub(".*", name) for name, _ in named}
    shapes = dict((name, tuple(p.shape)) for name, p in named)
    if BY_KIND["on"]:
        out = by_kind(model, out)
    for _ in range(4):
        seen = {}
        for name, pattern in out.items():
            seen.setdefault(pattern, set()).add(shapes[name])
        uneven = {pattern for pattern, s in seen.items() if len(s) > 1}
        if not uneven:
            return one_label_per_module(out)
        for name, pattern in out.items():
            if pattern in uneven:
                stars = [m.start() for m in re.finditer(r"\.\*(?=\.|$)", pattern)]
                if not stars:
                    raise Unsupported(f"{pattern} has instances of different shapes")
                index = list(PATTERN.finditer(name))[len(stars) - 1]
                if isinstance(model.get_submodule(name[:index.start()]), torch.nn.ModuleList):
                    rank = sorted(seen[pattern]).index(shapes[name])
                    label = f".*~{rank}" if rank else ".*"
                else:
                    label = index.group()
                out[name] = pattern[:stars[-1]] + label + pattern[stars[-1] + 2:]
    raise Unsupported(f"{sorted(uneven)[0]} has instances of different shapes")


def one_label_per_module(out: dict) -> dict:
    """Every tensor of a module under one module pattern, the most specific its tensors have (phi4_multimodal's
    conv.3: its weight keeps the index its shape needs, and its bias, as wide as its neighbours', would be conv.*),
    so that the template groups them into modules as the model does."""
    prefixes = {}
    for name, pattern in out.items():
        prefixes.setdefault(name.rsplit(".", 1)[0], set()).add(pattern.rsplit(".", 1)[0])
    labelled = {}
    for name, pattern in out.items():
        options = prefixes[name.rsplit(".", 1)[0]]
        best = min(options, key=lambda p: (p.count("*") - p.count("*~"), -len(p), p))
        labelled[name] = f"{best}.{pattern.rsplit('.', 1)[1]}"
    return labelled


def by_kind(model, out: dict) -> dict:
    """Each instance of a ModuleList as long as layer_types under `*~<that layer's kind>`, for the parts of a layer
    whose class the kind decides (in any build so far); the other parts keep their `*`, to be
    counted by whichever list they follow (kimi_linear's MLPs follow mlp_layer_types: named by the attention kinds,
    no count of either list gave theirs)."""
    kinds = getattr(model.config.get_text_config(), "layer_types", None)
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise Unsupported("no layer_types to name the layers' kinds by")
    found = kind_parts(model, kinds)
    if found - BY_KIND["parts"] and not BY_KIND["every"]:  # a build with kinds no build before had: those before
        # named that part otherwise
        BY_KIND["parts"] |= found
        raise KindParts()
    labelled = {}
    for name, pattern in out.items():
        stars = [m.start() for m in re.finditer(r"\.\*", pattern)]
        for star, index in zip(stars, PATTERN.finditer(name)):
            held = model.get_submodule(name[:index.start()])
            part = name[index.end() + 1:].split(".")[0]
            if isinstance(held, torch.nn.ModuleList) and len(held) == len(kinds) and (
                    BY_KIND["every"] or part in BY_KIND["parts"]):
                pattern = pattern[:star] + f".*~{kinds[int(index.group()[1:])]}" + pattern[star + 2:]
                break
        labelled[name] = pattern
    return labelled


def kind_parts(model, kinds) -> set:
    """The parts of a layer (its children's names) whose class is one per layer kind, not the same for all kinds."""
    out = set()
    for _, held in model.named_modules():
        if not isinstance(held, torch.nn.ModuleList) or len(held) != len(kinds):
            continue
        for part in {n for layer in held for n, _ in layer.named_children()}:
            classes = {}
            for kind, layer in zip(kinds, held):
                classes.setdefault(kind, set()).add(type(getattr(layer, part, None)).__name__)
            if all(len(c) == 1 for c in classes.values()) and len(set().union(*classes.values())) > 1:
                out.add(part)
    return out


def own_embedding_name(model, named) -> list:
    """The embedding under its own module's name, even where a tied lm_head's name comes first (camembert's
    lm_head.decoder.weight), so its pattern is the same whether the head is tied or not."""
    module = model.get_input_embeddings()
    own = next(n for n, m in model.named_modules() if m is module) + ".weight"
    return [(own if p is module.weight else n, p) for n, p in named]


def quantities(model) -> tuple:
    """Per parameter pattern: n:<pattern> instances, d<j>:<pattern> its dimensions; g:<group> routed-expert groups.
    Also the counts the planner reads, as the meta device gives them."""
    shapes, out, groups = {}, {}, {}
    named = own_embedding_name(model, list(model.named_parameters()))  # without tied duplicates
    pattern_of = patterns(model, named)
    for name, p in named:
        pattern = pattern_of[name]
        shapes[pattern] = tuple(p.shape)
        out[f"n:{pattern}"] = out.get(f"n:{pattern}", 0) + 1
        if ".experts." in name:  # the group under its pattern's name, as the tensors' patterns start with it
            groups.setdefault(pattern[:pattern.index(".experts") + len(".experts")], set()).add(
                name[:name.index(".experts") + len(".experts")])
    for pattern, shape in shapes.items():
        out[f"r:{pattern}"] = len(shape)
        whole = f"t:{RANKED.sub('*', pattern)}"  # a repeated block's instances of every shape
        out[whole] = out.get(whole, 0) + out[f"n:{pattern}"]
        for j, d in enumerate(shape):
            out[f"d{j}:{pattern}"] = d
    for group, members in groups.items():
        out[f"g:{group}"] = len(members)
    names = {id(p): n for n, p in named}
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    lm_head = None if head is None or head.weight is embedding else pattern_of[names[id(head.weight)]]
    total, owners = sum(p.numel() for _, p in named), {}
    for name, p in named:  # as params.meta_layout groups them: a tied weight belongs to the embedding only
        owners[name.rsplit(".", 1)[0]] = owners.get(name.rsplit(".", 1)[0], 0) + p.numel()
    counts = {"total": total, "largest": max(owners.values()), "embedding": embedding.numel(),
              "lm_head": 0 if lm_head is None else head.weight.numel()}
    return out, pattern_of[names[id(embedding)]], lm_head, counts


class Row:
    def __init__(self, name, kwargs, written, values, model):
        self.name, self.kwargs, self.written, self.values, self.parent = name, kwargs, written, values, None
        self.flat = shape_templates.flatten(AutoConfig.for_model(**written).to_dict())
        self.q, self.embedding, self.lm_head, self.counts = quantities(model)
        config = AutoConfig.for_model(**written)
        experts, per_token = params.routing(params.config_attr(config))
        routed = {}  # as params.meta_layout: per layer's experts module, the experts one token does not pass through
        for n, p in model.named_parameters():
            if ".experts." in n:
                routed[n[:n.index(".experts")]] = routed.get(n[:n.index(".experts")], 0) + p.numel()
        idle = sum(n // experts * (experts - per_token) for n in routed.values()) if experts else 0
        self.counts["active"] = self.counts["total"] - idle
        for name in ARCH:  # a dimension the config class derives (nemotron_h's num_hidden_layers: the length of
            # layers_block_type; prophetnet's: num_encoder_layers), which the planner reads as getattr does
            if isinstance(getattr(type(config), name, None), property) and type(getattr(config, name)) in (int, bool):
                self.q[f"a:{name}"] = int(getattr(config, name))

    def measured(self) -> dict:
        """What a template must count for this build: the meta device's counts and the derived dimensions."""
        return {**self.counts, **{k: v for k, v in self.q.items() if k.startswith("a:")}}


def try_row(model_type, name, kwargs):
    kwargs = following_layers(model_type, kwargs)
    try:
        written, flat, model = build(model_type, kwargs)
        return Row(name, dict(kwargs), written, variables_of(flat), model)
    except Unsupported:
        raise
    except TimeoutError:
        raise
    except Exception:  # noqa: BLE001 - a setting transformers refuses is no evidence
        return None


# ---- probing ---------------------------------------------------------------------------------------------------

def probe_values(key: str, value, kinds=()):
    last = key.split(".")[-1]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [v for v in (2 * value, value + 1, value + 2, value - 1, 3 * value) if v >= 0 and v != value]
    if value is None:
        return [8, True]
    if isinstance(value, float):
        return [value * 2 + 1]
    if isinstance(value, str):
        return [a for a in ACTIVATIONS if a != value] if "act" in last else []
    if isinstance(value, list):
        if not value:
            return [[0]]
        if all(isinstance(x, float) for x in value):  # falcon_h1's muP multipliers: other values, same length
            return [[x * 2 + 1 for x in value], value[:-1]]
        if len(set(map(json.dumps, value))) > 1:
            return [value[::-1], [value[0]] * len(value), value[:-1]]
        return [value[:-1] + [k] for k in kinds if k != value[0] and isinstance(value[0], str)] + [value[:-1]]
    return []


def seeds(model_type, sizes: dict) -> dict:
    return dict(SEEDS[model_type](sizes)) if model_type in SEEDS else {}


def base_kwargs(cls, defaults: dict, sizes: dict) -> dict:
    """The sizes set on the config's own keys (and a composite's sub-configs holding them); token ids the smaller
    vocabulary would not hold, inside it; the type's seeds."""
    out = seeds(cls.model_type, sizes)
    for key, value in defaults.items():
        last = key.split(".")[-1]
        if last in sizes:
            out[key] = sizes[last]
        elif last.endswith("_token_id") and isinstance(value, int) and value >= sizes["vocab_size"]:
            out[key] = sizes["vocab_size"] - 1
    for alias, real in cls.attribute_map.items():
        if alias in sizes and real in defaults:
            out[real] = sizes[alias]
    return out


def first_build(model_type, name, kwargs):
    """The sizes as given, else with the one size left at its default that lets them build (falcon_h1's mamba heads
    must divide its default mamba_d_ssm; gpt_neo's layer count must match its default attention pattern)."""
    row = try_row(model_type, name, kwargs)
    for key in kwargs if row is None else ():
        row = try_row(model_type, name, {k: v for k, v in kwargs.items() if k != key})
        if row is not None:
            break
    return row


def skipped(key: str) -> bool:
    parts = key.split(".")
    last = parts[-1]
    return (last in NOT_SWITCHES or last.startswith("output_") or last.endswith("_token_id")
            or any(p in shape_templates.IGNORED for p in parts))


def children(model_type, parent: Row, changes: dict, skip=()):
    """The parent with each change applied alone (the change's key recorded, for relevance)."""
    out = []
    for key, new in sorted(changes.items()):
        if key in skip:
            continue
        row = try_row(model_type, f"{parent.name} + {key}={new}", {**parent.kwargs, key: new})
        if row is not None:
            row.parent = parent.name
            out.append(row)
    return out


def change_keys(name: str) -> list:
    """The keys a row's changes set or left out, in order ("layer_types=[...] + conv_bias=True", "x left out")."""
    return [part.split("=")[0].removesuffix(" left out") for part in name.split(" + ")]


def first_holder(quantity, rows) -> Row:
    """The row fewest changes from the base that holds the quantity."""
    return min((r for r in rows if r.q.get(quantity)), key=lambda r: (
        r.name.startswith("joint"), r.name.count(" + "), len(r.name), r.name))


def around_new_tensors(model_type, base: Row, rows, changes: dict, odd: dict, rounds=3, firsts=None) -> list:
    """Each change applied to every row one change from the base that holds a tensor the base lacks (or to the
    firsts given); then to the first row holding a tensor none of those rows had, and so on (LFM2's conv bias exists
    only where conv_bias meets a conv layer, two changes away: seen in that one row alone, its width was fitted as the
    base's constant 64)."""
    out, expanded = [], set()
    if firsts is None:
        firsts = [r for r in rows if r.parent == base.name and set(r.q) - set(base.q)]
    for _ in range(rounds):
        found = []
        for row in firsts:
            expanded.add(row.name)
            done = set(change_keys(row.name))
            found += children(model_type, row, changes, skip=done) + children(model_type, row, odd, skip=done)
        out += found
        firsts = []
        for pattern in sorted({k for r in out for k in r.q if k.startswith("n:")} - set(base.q)):
            if not any(r.name in expanded for r in rows + out if pattern in r.q):
                first = first_holder(pattern, rows + out)
                expanded.add(first.name)
                firsts.append(first)
        if not firsts:
            break
    return out


def reordered(current, new) -> bool:
    """The same items in another order (a list probed by its reverse)."""
    return isinstance(current, list) and isinstance(new, list) and new != current and sorted(
        map(json.dumps, new)) == sorted(map(json.dumps, current))


def swaps_kind(current, new) -> bool:
    return isinstance(current, list) and len(set(map(json.dumps, current))) == 1 and isinstance(current[0], str) and (
        isinstance(new, list) and len(new) == len(current))


def layer_kinds(model_type) -> list:
    """Words the config and the modeling code both quote (lfm2's "conv" beside "full_attention"): what else a list
    of one kind, such as a default layer_types of full attention only, may hold."""
    config, *modeling = model_sources(CONFIG_MAPPING[model_type])
    quoted = [set(re.findall(r"[\"']([a-z][a-z0-9_]*)[\"']", text)) for text in (config, "\n".join(modeling))]
    return sorted(quoted[0] & quoted[1] - {model_type})


def probe(model_type, base: Row, defaults: dict, rng, swap_kinds=True):
    """Rows with one key changed (each key's first value that builds), with a sizing key left out (alone and with
    another size changed), rows around each change that brought new tensors, and random sets of changes."""
    rows, changes, held, derived_lists = [], {}, {}, set()
    kinds = layer_kinds(model_type) if swap_kinds else []
    for key in sorted(set(defaults) | set(base.flat)):
        if skipped(key):
            continue
        value = defaults.get(key)
        current = base.kwargs.get(key, base.flat.get(key, value))
        built = False
        for new in probe_values(key, current, kinds):
            row = try_row(model_type, f"{key}={new}", {**base.kwargs, key: new})
            if row is None or (row.q == base.q and swaps_kind(current, new)):
                continue  # a word that is no layer kind of this model may build and change nothing
            if row.q == base.q and reordered(current, new):
                continue  # the same kinds in another order; fewer or more of one kind may change the shapes, and
                # where none builds the list is held or checked like any other that does not
            built, row.parent = True, base.name
            if current is None and row.q != base.q:  # None switches to another formula: configs keep None,
                held[key] = None  # unless survey() finds the size None stands for (gpt_bigcode's n_inner)
            elif row.q != base.q or row.values != base.values:
                rows.append(row)
                changes[key] = new
            break
        if not built and current != value and key not in base.kwargs:
            derived_lists.add(key)  # derived from other keys (one per layer, d_model // n_head): a config's own
            # value must agree with the derivation
        elif not built and not shape_templates.HARMLESS.search(key):
            held[key] = value  # nothing builds (or nothing to try): a config must keep the default
    odd = {}
    for key, new in sorted(changes.items()):  # an odd size too: where a division leaves a remainder
        current = base.kwargs.get(key, base.flat.get(key))
        if isinstance(current, int) and not isinstance(current, bool):  # or a second size, where the first was
            # the next one (granitemoeshared's shared MLP width: 0 is none, and 1 alone looks like a switch)
            extra = current + 1 if new != current + 1 else current + 2
        elif current is None and isinstance(new, int) and not isinstance(new, bool):  # a None set to a size: a
            extra = 2 * new  # second size (kimi_linear's q_lora_rank, which a base without MLA layers never showed)
        else:
            continue
        row = try_row(model_type, f"{key}={extra}", {**base.kwargs, key: extra})
        if row is not None:
            row.parent = base.name
            rows.append(row)
            odd[key] = extra
    rows += each_kind_once_more(model_type, base, skip=derived_lists | set(held))
    sizes = {k: v for k, v in changes.items() if k in base.kwargs}
    for key in sorted(base.kwargs):
        left = {k: v for k, v in base.kwargs.items() if k != key}
        row = try_row(model_type, f"{key} left out", left)
        if row is None:
            continue
        row.parent = base.name
        rows.append(row)
        for other, new in sorted(sizes.items()):
            if other != key:
                extra = try_row(model_type, f"{row.name} + {other}={new}", {**left, other: new})
                if extra is not None:
                    extra.parent = row.name
                    rows.append(extra)
    rows += around_new_tensors(model_type, base, rows, changes, odd)
    keys = sorted(changes)
    for i in range(JOINT * 3):
        if sum(r.name.startswith("joint") for r in rows) >= JOINT or not keys:
            break
        chosen = rng.sample(keys, max(1, len(keys) // 2))
        kwargs = {**base.kwargs, **{k: changes[k] for k in chosen}}
        dropped = [k for k in base.kwargs if rng.random() < 0.2]
        row = try_row(model_type, f"joint {i}", {k: v for k, v in kwargs.items() if k not in dropped})
        if row is not None:
            rows.append(row)
    holders, added = fewest_changes_holding(model_type, base, rows, changes)
    rows += added
    rows += around_new_tensors(model_type, base, rows, changes, odd, firsts=holders)
    return rows, changes, held, derived_lists


def fewest_changes_holding(model_type, base: Row, rows, changes: dict) -> tuple:
    """For each tensor only a joint row holds, that row's changes less each one the tensor does without (gemma4's
    double-wide MLP needs use_double_wide_mlp and num_kv_shared_layers together, which no row one or two changes from
    the base has): (those builds, them and their sizes at another value)."""
    seen = {k for r in rows if not r.name.startswith("joint") for k in r.q if k.startswith("n:")}
    holders, out = [], []
    for pattern in sorted({k for r in rows if r.name.startswith("joint") for k in r.q if k.startswith("n:")} - seen):
        if any(pattern in r.q for r in out):
            continue
        row = first_holder(pattern, [r for r in rows if r.name.startswith("joint")])
        keys = [k for k in sorted(changes) if row.kwargs.get(k) == changes[k] and base.kwargs.get(k) != changes[k]]
        for key in list(keys):
            fewer = [k for k in keys if k != key]
            trial = try_row(model_type, "", {**base.kwargs, **{k: changes[k] for k in fewer}})
            if trial is not None and trial.q.get(pattern):
                keys = fewer
        holder = try_row(model_type, " + ".join(f"{k}={changes[k]}" for k in keys),
                         {**base.kwargs, **{k: changes[k] for k in keys}})
        if holder is None or not holder.q.get(pattern):
            continue
        holder.parent = base.name if len(keys) == 1 else None
        holders.append(holder)
        out.append(holder)
        for key in keys:  # its sizes at another value (num_kv_shared_layers was probed at 1 only)
            if type(changes[key]) is int:
                more = try_row(model_type, f"{holder.name} + {key}={changes[key] + 1}", {
                    **holder.kwargs, key: changes[key] + 1})
                if more is not None:
                    more.parent = holder.name
                    out.append(more)
    return holders, out


def shaping_strings(base, rows, changes):
    """Strings whose change moved the shapes (apertus's xIELU activation holds parameters, gelu none): no formula
    reads a string, so a config must keep the default, and the rows that changed one teach nothing."""
    return [k for k, v in changes.items() if isinstance(v, str) and any(
        r.name == f"{k}={v}" and r.q != base.q for r in rows)]


# ---- fitting ---------------------------------------------------------------------------------------------------

def term_list(names):
    """Candidate terms over the variables `names`, simplest first."""
    names = sorted(names)
    out = [("p",)] + [("p", a) for a in names]
    out += [("p", a, b) for a, b in itertools.combinations_with_replacement(names, 2)]
    out += [("p", *abc) for abc in itertools.combinations_with_replacement(names, 3)]
    out += [("m", a, b) for a, b in itertools.combinations(names, 2)]
    out += [("ne", a, b) for a, b in itertools.combinations(names, 2)]  # a projection only where two sizes differ
    out += [("q", a, b) for a, b in itertools.permutations(names, 2)]  # patches per image: (image // patch) ** 2
    consts = (2, 3, 4, 8, 16)
    for a in names:
        for d in [n for n in names if n != a] + list(consts):
            for c in (0, -1) + ((d - 1,) if isinstance(d, int) else ()):
                out.append(("f", ((1, a),), c, d))
    for a, b in itertools.permutations(names, 2):
        for d in [n for n in names if n != a] + list(consts):
            for s in (1, -1):
                for c in (0, -1):
                    out.append(("f", ((1, a), (s, b)), c, d))
        for c in names:
            if c != b:
                out.append(("pf", a, b, c))
    for a, b in itertools.combinations_with_replacement(names, 2):  # mamba's head_dim: expand * hidden // heads
        out += [("pd", a, b, c) for c in names if c not in (a, b)]
    out += [("k", *abc) for abc in itertools.permutations(names, 3)]
    out += [("u", a, m, *nd) for a, m in itertools.permutations(names, 2) for nd in ((1, 1), (2, 3))]
    if len(names) <= 6:  # last: combinations() pairs them with the monomials (ERNIE's dense layers: L - w)
        out += [("w", *abcd) for abcd in itertools.permutations(names, 4)]
    return out


def as_json_term(term):
    if term[0] == "f":
        return ["f", [list(x) for x in term[1]], term[2], term[3]]
    return list(term)


def column(term, rows):
    try:
        return np.array([shape_templates.term_value(as_json_term(term), r) for r in rows], dtype=np.int64)
    except (ZeroDivisionError, KeyError):
        return None


def fit(ys, rows, names):
    """The simplest [[coef, term]...] giving ys exactly on every row's variables, or None."""
    y = np.array(ys, dtype=np.int64)
    cols, terms, seen = [], [], set()
    switches = {n for n in names if all(r.get(n, 0) in (0, 1) for r in rows)}
    for term in term_list(names):
        if (term[0] == "f" and term[3] in switches) or (term[0] in ("pf", "pd") and term[3] in switches) or (
                term[0] in ("k", "u") and term[2] in switches) or (term[0] == "w" and term[4] in switches):
            continue  # a division by a switch is no size
        col = column(term, rows)
        if col is None or not col.any() or col.tobytes() in seen:
            continue
        seen.add(col.tobytes())
        cols.append(col)
        terms.append(term)
    if not cols:
        return None
    T = np.stack(cols, axis=1)
    for j in range(T.shape[1]):  # one term
        nz = np.flatnonzero(T[:, j])
        if len(nz) and y[nz[0]] % T[nz[0], j] == 0:
            c = y[nz[0]] // T[nz[0], j]
            if c and (c * T[:, j] == y).all():
                return [[int(c), as_json_term(terms[j])]]
    for k in range(2, MAX_TERMS + 1):
        combos = np.array(list(combinations(k, T.shape[1], monomials=sum(t[0] == "p" for t in terms),
                                            windows=sum(t[0] == "w" for t in terms))), dtype=np.int64).reshape(-1, k)
        for start in range(0, len(combos), 2048):
            found = first_exact(T, y, combos[start:start + 2048])
            if found is not None:
                combo, coefs = found
                return [[int(c), as_json_term(terms[j])] for c, j in zip(coefs, combo)]
    return None


def first_exact(T, y, combos):
    """The first of these column sets (and its integer coefficients) that gives y exactly: every set's least squares
    at once through its normal equations on unit columns; a set too near singular for them, through lstsq alone."""
    scale = np.linalg.norm(T.astype(float), axis=0)
    A = np.moveaxis((T.astype(float) / scale)[:, combos], 0, 1)  # (sets, rows, k)
    gram = A.transpose(0, 2, 1) @ A
    rhs = A.transpose(0, 2, 1) @ y.astype(float)
    det = np.linalg.det(gram)
    solid = np.abs(det) > 1e-6
    sol = np.full(rhs.shape, np.nan)
    sol[solid] = np.linalg.solve(gram[solid], rhs[solid][..., None])[..., 0]
    for i in np.flatnonzero(~solid):
        sol[i] = np.linalg.lstsq(A[i], y.astype(float), rcond=None)[0]
    coefs = np.rint(sol / scale[combos])
    sane = np.isfinite(coefs).all(1) & (coefs != 0).all(1) & (np.abs(np.nan_to_num(coefs)).max(1) <= 1e6)
    for i in np.flatnonzero(sane):
        c = coefs[i].astype(np.int64)
        if (T[:, combos[i]] @ c == y).all():
            return combos[i], c
    return None


def combinations(k, m, monomials, windows=0):
    """Index sets of k columns to try: any two of the first 400, or a monomial and a layer window (the last
    `windows` columns); for three, any of the monomials, or the constant, a monomial and any term, or two monomials
    and any term (gpt_bigcode's fused qkv: 3h - 2·mq·h + 2·mq·(h // heads))."""
    if k == 2:
        yield from itertools.combinations(range(min(400, m)), 2)
        for i in range(min(30, monomials)):
            yield from ((i, j) for j in range(max(400, m - windows), m))
        return
    yield from itertools.combinations(range(min(30, monomials)), 3)
    for i in range(1, min(monomials, 30)):
        for j in range(monomials, min(m, monomials + 300)):
            yield 0, i, j
    for i, i2 in itertools.combinations(range(1, min(monomials, 15)), 2):
        for j in range(monomials, min(m, monomials + 300)):
            yield i, i2, j


def relevant(quantity, base, rows):
    """(the keys whose change moved it, every variable those changes moved): between a reference row holding the
    quantity (the base, else the first single change that brought it) and that reference's single-change rows; with
    the change that brought it."""
    everyone = [base] + rows
    reference = next((r for r in everyone if r.q.get(quantity) and (r is base or r.parent == base.name)), None)
    if reference is None and any(r.q.get(quantity) for r in rows):  # two changes away: LFM2's conv bias
        reference = first_holder(quantity, rows)
    if reference is None:
        return set(), set()
    movers = [reference] if reference is not base else []
    movers += [r for r in everyone if r.parent == reference.name and r.q.get(quantity, 0) != reference.q.get(
        quantity, 0)]
    everything = set().union(*({k for k in changed(r, base if r is reference else reference) if not (
        '#"' in k and quantity not in r.q and quantity[0] == "d")} for r in movers))  # a list with no layer of a
    # kind says nothing of a width (nemotron_h's mamba in_proj); a size that removed the tensor may (opt's project_in)
    keys = set()
    for r in movers:  # the change that made each mover; every change that made the reference
        keys |= set(change_keys(r.name) if r is reference else change_keys(r.name)[-1:])
    return {v for v in everything if v.split("#")[0] in keys}, everything


def changed(a, b):
    return {k for k in set(a.values) | set(b.values) if a.values.get(k) != b.values.get(k)}


def fit_quantity(quantity, base, rows):
    everyone = [base] + rows
    defined = [r for r in everyone if quantity in r.q] if not quantity.startswith(("n:", "g:", "t:")) else everyone
    kind = re.search(r"\*~([^.]+)\.", quantity) if BY_KIND["on"] and quantity.startswith("n:") else None
    if kind:  # one per layer of that kind, or of another list's kind (hy_v4's indexer: one per "full" entry of
        # indexer_types, which transformers derives from the layer count; a formula of the count fitted the builds
        # and missed a held-out one)
        found = kind_count(quantity, everyone, f'layer_types#"{kind.group(1)}"')
        if found:
            return found
    primary, everything = relevant(quantity, base, rows)
    if defined is not everyone:  # a size only of keys set where the tensor is (not kimi_linear's q_lora_rank: its
        # q_proj is there only where that is None)
        seen = set().union(*(r.values for r in defined))
        primary, everything = primary & seen, everything & seen
    tries = [names for names in (primary, everything) if len(names) <= 8]
    singles = [set()] + [{name} for name in sorted(primary) if "#" not in name or name.endswith("#all") and all(
        name in r.values for r in defined)] if len(primary) > 1 else []  # one width every layer has (gemma3n's); a
    # constant or one plain key alone, on every row that has it (lfm2's conv width, moved with attention indices
    # that only some rows list)
    if not tries and not singles:
        return last_resort(quantity, everyone, f"{quantity} moves with {len(everything)} keys")
    extras = sorted(e for e in structural(everyone) - primary if all(e in r.values for r in defined))  # not a
    # None key set in a few builds (electra's classifier_dropout at 8 and 16: a formula fitted those builds alone)
    tries += [primary | {extra} for extra in extras[:4] if len(primary) < 8]
    tries += [primary | set(two) for two in itertools.combinations(extras[:6], 2) if len(primary) < 7]  # jamba's
    # layer period and offset: they move nothing in the base's few layers
    tries += singles
    for names in tries:  # a key that moved it only together with another comes last
        usable = [r for r in defined if names <= set(r.values)]
        expr = fit([r.q.get(quantity, 0) for r in usable], [r.values for r in usable], names)
        if expr is not None:
            return expr
    for names in tries:  # a tensor only where a switch is on, in a number the switch does not say (jamba's
        # mamba conv bias: in every layer that is not attention)
        usable = [r for r in defined if names <= set(r.values)]
        for switch in sorted(n for n in names if is_switch(n, usable)):
            if any(r.q.get(quantity, 0) for r in usable if not r.values[switch]):
                continue
            on = [r for r in usable if r.values[switch]]
            expr = fit([r.q.get(quantity, 0) for r in on], [r.values for r in on], names - {switch})
            if expr is not None:
                return [[c, ["x", switch, term]] for c, term in expr]
    usable = [r for r in defined if primary <= set(r.values)]
    for switch in sorted(n for n in primary if is_switch(n, usable)):  # one formula where a
        # switch is on, another where it is off (lfm2's FFN width: rounded where block_auto_adjust_ff_dim)
        sides = [[r for r in usable if r.values[switch] == on] for on in (0, 1)]
        off, on = (fit([r.q.get(quantity, 0) for r in side], [r.values for r in side], primary - {switch})
                   for side in sides)
        if off is not None and on is not None:
            return off + [[-c, ["x", switch, t]] for c, t in off] + [[c, ["x", switch, t]] for c, t in on]
    if quantity.startswith(("n:", "g:", "t:")):
        found = unset_sides(quantity, everyone, primary, kind.group(1) if kind else "")
        if found:
            return found
    for partner in partners(quantity, primary, everyone):  # electra's embedding projection: only where the
        # embedding_size differs from the hidden_size, which no change of embedding_size alone made equal
        usable = [r for r in defined if primary | {partner} <= set(r.values)]
        expr = fit([r.q.get(quantity, 0) for r in usable], [r.values for r in usable], primary | {partner})
        if expr is not None:
            return expr
    return last_resort(quantity, everyone, f"no formula for {quantity} over {sorted(everything)}")


def unset_sides(quantity, everyone, primary, kind: str):
    """A count one way where a key is None and another where it is set (kimi_linear's q_proj: in its full-attention
    layers only where q_lora_rank is None): the two formulas over the key's `#set` switch, which every row then
    carries; else None."""
    for key in sorted(n for n in primary if "#" not in n):
        on = [r for r in everyone if key in r.values]
        off = [r for r in everyone if key not in r.values and r.flat.get(key, 0) is None]
        if not on or not off or len(on) + len(off) != len(everyone):
            continue
        off_expr, on_expr = (side_count(quantity, side, names, kind) for side, names in (
            (off, primary - {key}), (on, primary)))
        if off_expr is None or on_expr is None:
            continue
        switch = f"{key}#set"
        for r in everyone:
            r.values[switch] = int(key in r.values)
        return off_expr + [[-c, ["x", switch, t]] for c, t in off_expr] + [[c, ["x", switch, t]] for c, t in on_expr]
    return None


def side_count(quantity, rows, names, kind: str):
    """A count on these rows: none, one per layer of the kind, or a formula of the names."""
    ys = [r.q.get(quantity, 0) for r in rows]
    if not any(ys):
        return []
    found = kind_count(quantity, rows, f'layer_types#"{kind}"') if kind else None
    usable = [r for r in rows if names <= set(r.values)]
    return found or fit([r.q.get(quantity, 0) for r in usable], [r.values for r in usable], names)


def last_resort(quantity, everyone, failure: str):
    """Where no formula of what moved it fits: a list's count of one kind or its length, or the layers less that, if
    that alone holds in every row (lfm2's conv layers moved with its layer count, its layer_types and the attention
    indices that list is derived from); else Unsupported(failure)."""
    found = (kind_count(quantity, everyone, "") or kind_rest(quantity, everyone)) if quantity.startswith((
        "n:", "g:")) else None
    if found:
        return found
    raise Unsupported(failure)


def kind_count(quantity, everyone, first: str):
    """[[1, ["p", a list's count of one kind, or its length]]] where that count is the quantity in every row holding
    the list (the `first` list's name tried first), else None (llama4_text's MoE layers: as many as moe_layers lists,
    a pattern of interleave_moe_layer_step where it is left out)."""
    for name in sorted(list_counts(everyone[0].values), key=lambda n: (n.split(".")[-1] != first, n)):
        if agrees_on([[1, ["p", name]]], quantity, [r for r in everyone if name in r.values]):
            return [[1, ["p", name]]]
    return None


def list_counts(values) -> list:
    """A list's count of each kind, and its length (not a pattern's count over the layers)."""
    return [n for n in values if ('#"' in n and not n.endswith("%")) or n.endswith(("#len", "#in"))]


def kind_rest(quantity, everyone):
    """[[1, layers], [-1, a list's count]] where the layers less that count are the quantity in every row holding
    both (llama4_text's dense layers: those moe_layers does not list), else None."""
    layers = sorted(n for n in everyone[0].values if n.split(".")[-1] == "num_hidden_layers")
    for name in sorted(list_counts(everyone[0].values)):
        for count in layers:
            expr = [[1, ["p", count]], [-1, ["p", name]]]
            if count.rpartition(".")[0] == name.rpartition(".")[0] and agrees_on(
                    expr, quantity, [r for r in everyone if {name, count} <= set(r.values)]):
                return expr
    return None


def partners(quantity, primary, rows) -> list:
    """For a tensor present or not (a count of 0 or 1): the sizes that equal a key it moved with in some build."""
    if not quantity.startswith("n:") or {r.q.get(quantity, 0) for r in rows} - {0, 1}:
        return []
    seen = {}
    for r in rows:
        for k, v in r.values.items():
            seen.setdefault(k, set()).add(v)
    return sorted(k for k in seen if k not in primary and any(seen[k] & seen.get(p, set()) - {0, 1}
                                                              for p in primary))[:6]


def gated_count(quantity, base, rows, counts):
    """A count that is another tensor's count where a switch is on, else 0 (jamba's mamba biases: one per mamba
    layer, with mamba_proj_bias): checked on every row, before a search that the few rows with the switch on could
    fool."""
    everyone = [base] + rows
    if all(r.q.get(quantity) for r in everyone):
        return None
    switches = sorted(n for n in structural(everyone) if is_switch(n, everyone))
    for switch, count in itertools.product(switches, counts):
        expr = [[c, ["x", switch, term]] for c, term in count]
        if count and switch not in shape_templates.reads(count) and agrees_on(expr, quantity, everyone):
            return expr  # kimi_linear's q_a_proj bias: with attention_bias, where its q_lora_rank#set has a q_a_proj
    return None


def is_switch(name, rows) -> bool:
    """0 and 1 in these rows, and a boolean, a None or 0 switch, or a list's count: not a size that only showed
    those (granitemoeshared's shared MLP width: term_value's "x" multiplies by it)."""
    return {r.values.get(name) for r in rows} == {0, 1} and (
        "#" in name or all(isinstance(r.flat.get(name), bool) for r in rows if name in r.flat))


def agrees_on(expr, quantity, rows) -> bool:
    try:
        return all(shape_templates.evaluate(expr, r.values) == r.q.get(quantity, 0) for r in rows)
    except (KeyError, ZeroDivisionError):
        return False


def structural(rows):
    """Small integer variables (layer periods, offsets, switches) that differ between rows."""
    seen = {}
    for r in rows:
        for k, v in r.values.items():
            seen.setdefault(k, set()).add(v)
    return {k for k, vs in seen.items() if len(vs) > 1 and max(vs) <= 64}


def even_divisions(tpl, rows) -> list:
    """The floor divisions in the template's formulas that left nothing over in every build (falcon_h1's
    mamba_d_ssm // mamba_n_heads: its validator refuses a remainder): a config where one does is not vouched for."""
    exprs = [count for _, count, _ in tpl["params"]] + [d for _, _, dims in tpl["params"] for d in dims]
    exprs += list(tpl["groups"].values()) + list(tpl["derived"].values())
    exprs += [r["derived"] for r in tpl["vars"].values() if "derived" in r]
    terms, out = [], []
    for expr in exprs:
        for _, term in expr:
            while term[0] == "x":
                term = term[2]
            if term[0] in ("f", "pd", "pf", "q") and term not in terms:
                terms.append(term)
    for term in terms:
        seen = []
        for r in rows:
            try:
                seen.append(shape_templates.remainder(term, r.values))
            except (KeyError, ZeroDivisionError):
                continue
        if seen and not any(seen):
            out.append(term)
    return out


def variable_rules(needed, base, rows, defaults_values, cls):
    """Each variable's value when a config.json leaves it out: the class default, or what transformers derives."""
    rules, derived = {}, {}
    everyone = [base] + rows
    for name in sorted(needed):
        key = name.split("#")[0]
        unset = [r for r in everyone if key not in r.kwargs and not any(
            a in r.kwargs for a, real in cls.attribute_map.items() if real == key) and name in r.values]
        default = defaults_values.get(name)
        if all(r.values[name] == default for r in unset) and default is not None:
            rules[name] = {"default": default}
        elif unset:
            derived[name] = unset
        else:
            rules[name] = {"default": default} if default is not None else {"required": True}
    plain = sorted(n for n in rules)
    for name, unset in derived.items():
        reference = next((r for r in everyone if r.name == f"{name.split('#')[0]} left out"), base)
        moved = [r for r in unset if r.parent == reference.name and r.values.get(name) != reference.values.get(name)]
        keys = {r.name.split(" + ")[-1].split("=")[0] for r in moved if "=" in r.name}
        primary = {k for k in plain if k.split("#")[0] in keys}
        everything = {k for r in moved for k in changed(r, reference) if k in plain}
        expr = None
        for movers in (primary, everything):
            movers = {m for m in movers if all(m in r.values for r in unset)} - {name}
            if expr is None and len(unset) >= 3 and len(movers) <= 6:
                expr = fit([r.values[name] for r in unset], [r.values for r in unset], sorted(movers))
        rules[name] = {"derived": expr} if expr else {"required": True}
    ordered = {n: r for n, r in rules.items() if "derived" not in r}
    ordered.update({n: r for n, r in rules.items() if "derived" in r})
    for name, rule in list(ordered.items()):  # a derived formula reads plain variables only
        if "derived" in rule:
            for m in shape_templates.reads(rule["derived"]):
                if m not in ordered or "derived" in ordered[m]:
                    ordered[name] = {"required": True}
    return ordered


def stand_ins(rules, params_out, groups, base, rows):
    """A required variable that a config may leave None (num_key_value_heads: the model then uses the heads): the
    plain variable (or four times one) every formula agrees with in the rows that left it out."""
    for name, rule in rules.items():
        if "required" not in rule:
            continue
        key = name.split("#")[0]
        left = [r for r in rows if r.name.startswith(f"{key} left out") and name not in r.values]
        plain = sorted(n for n, r in rules.items() if "default" in r)
        candidates = [[c, ["p", a]] for c in (1, 4) for a in plain] + [  # gpt_neo's inner width: 4 * hidden
            [1, ["f", [[1, a]], 0, b]] for a in plain for b in plain if a != b]
        for expr in candidates:
            try:
                if left and all(agrees(r, {**r.values, name: shape_templates.evaluate([expr], r.values)},
                                       params_out, groups) for r in left):
                    rules[name] = {"derived": [expr]}
                    break
            except (KeyError, ZeroDivisionError):
                continue


def agrees(row, values, params_out, groups) -> bool:
    try:
        for pattern, count, dims in params_out:
            n = shape_templates.evaluate(count, values)
            if n != row.q.get(f"n:{pattern}", 0):
                return False
            if n and [shape_templates.evaluate(d, values) for d in dims] != [
                    row.q[f"d{j}:{pattern}"] for j in range(len(dims))]:
                return False
        return all(shape_templates.evaluate(e, values) == row.q.get(f"g:{g}", 0) for g, e in groups.items())
    except (KeyError, TypeError, ZeroDivisionError):
        return False


ARCH = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "intermediate_size",
        "num_key_value_heads", "head_dim", "tie_word_embeddings", "num_experts_per_tok", "moe_intermediate_size",
        *EXPERT_COUNT_KEYS, *params.NESTED.values())


def none_sizes(model_type, base, rows, held) -> dict:
    """Keys held at None whose int setting is a size (gpt_bigcode's n_inner: None is 4 * n_embd): key -> the rows
    setting it to 8 and 16, where a dimension follows it linearly, a * value + b, and gives back the size None stands
    for in every row that leaves it None (filled into their values; survey() drops them all if no template fits)."""
    out = {}
    for key in [k for k, v in held.items() if v is None]:
        pair = [try_row(model_type, f"{key}={n}", {**base.kwargs, key: n}) for n in (8, 16)]
        if None in pair or key in pair[0].values and pair[0].values[key] != 8:
            continue
        for quantity in sorted(set(pair[0].q) & set(pair[1].q) & set(base.q)):
            a, rest = divmod(pair[1].q[quantity] - pair[0].q[quantity], 8)
            b = pair[0].q[quantity] - 8 * a
            if quantity.startswith("d") and a > 0 and not rest and all(
                    (r.q.get(quantity, b) - b) % a == 0 and r.q.get(quantity, b) > b for r in [base] + rows):
                out[key] = (pair, quantity, a, b)
                break
    return out


def with_none_sizes(model_type, base, rows, changes, held, found) -> list:
    for key, (pair, quantity, a, b) in found.items():
        for r in [base] + rows:
            if key not in r.kwargs:
                r.values[key] = (r.q[quantity] - b) // a
        for r in pair:
            r.parent = base.name
        rows = rows + pair
        changes[key] = 8
        del held[key]
    return rows


def unset_switches(model_type, base, changes, held) -> list:
    """Keys still held at None whose setting adds tensors (kimi_linear's q_lora_rank: a low-rank query in place of
    q_proj): built at 8 and at 16, so that a count switches on `key#set` and a size follows the key."""
    out = []
    for key in [k for k, v in held.items() if v is None]:
        pair = [try_row(model_type, f"{key}={n}", {**base.kwargs, key: n}) for n in (8, 16)]
        if None in pair or pair[0].q == base.q or pair[0].values.get(key) != 8:
            continue
        for r in pair:
            r.parent = base.name
        out += pair
        changes[key] = 8
        del held[key]
    return out


def survey(model_type: str, rng) -> dict:
    """As survey_plain(); where that fails, once more with the layers named by their kind (BY_KIND): the parts whose
    class the kind decides, then every part; the first failure's reason kept if those fail too."""
    try:
        return survey_plain(model_type, rng)
    except Unsupported as err:
        first = err
    BY_KIND["on"] = True
    try:
        for every in (False, True):  # the parts whose class the kind decides, else every part (inkling's attention:
            # one class, its shapes by kind)
            BY_KIND["every"], BY_KIND["parts"] = every, set()
            while True:
                try:
                    return survey_plain(model_type, random.Random(model_type))
                except KindParts:
                    continue  # from the start, with every build naming the parts found so far by kind
                except Unsupported:
                    break
        raise first
    finally:
        BY_KIND["on"] = False


def survey_plain(model_type: str, rng) -> dict:
    """With the None sizes filled, the None switches set, and the one-kind lists given other kinds; where that fails
    and any was used, once more without those it used, as if it never tried (cohere2_moe's dense layers bring a
    width, set by a key its all-sparse base never showed)."""
    try:
        return survey_with(model_type, rng, fill_nones=True, swap_kinds=True, set_nones=True)
    except KindParts:
        raise
    except Unsupported as err:
        used = getattr(err, "used", {})
        if not any(used.values()):
            raise
        return survey_with(model_type, random.Random(model_type), **{k: not v for k, v in used.items()})


def lengthened(model_type, base) -> list:
    """Each list as long as an attribute the config class derives (nemotron_h's num_hidden_layers: the length of
    layers_block_type, which the probes keep), built twice as long, so the attribute's formula can follow it."""
    lengths = {v for k, v in base.q.items() if k.startswith("a:")}
    out = []
    for key, value in sorted(base.flat.items()):
        if isinstance(value, list) and value and len(value) in lengths:
            row = try_row(model_type, f"{key}={value + value}", {**base.kwargs, key: value + value})
            if row is not None and row.q != base.q:
                row.parent = base.name
                out.append(row)
    return out


def zero_counts(rows) -> None:
    """A list's count of an item it does not hold is 0 (as shape_templates.list_variable reads it), not unknown:
    the builds whose layer_types hold no conv layer say how many conv tensors none means."""
    items = {name for r in rows for name in r.values if "#\"" in name and not name.endswith("%")}  # kinds, not
    # indices, and not a pattern's count over the layers, which only a list shorter than the layers has
    for r in rows:
        for name in items:
            if f"{name.split('#')[0]}#len" in r.values:
                r.values.setdefault(name, 0)


def zero_switches(rows) -> None:
    """`key#nz` beside each size that is 0 in some builds and not in others (granitemoeshared's shared MLP: none where
    shared_intermediate_size is 0): a count can follow it where no formula of the size does."""
    keys = {k for r in rows for k, v in r.values.items() if v == 0 and "#" not in k and not isinstance(
        r.flat.get(k), bool)}
    keys = {k for k in keys if any(r.values.get(k) for r in rows)}
    for r in rows:
        r.values.update({f"{k}#nz": int(r.values[k] != 0) for k in keys if k in r.values})


def survey_with(model_type: str, rng, fill_nones: bool, swap_kinds: bool, set_nones: bool) -> dict:
    cls = CONFIG_MAPPING[model_type]
    if cls.model_type != model_type:
        return {"kept": False, "why": f"its config.json names {cls.model_type}"}
    defaults = shape_templates.flatten(cls().to_dict())
    base = first_build(model_type, "base", base_kwargs(cls, defaults, SMALL)) or try_row(model_type, "base", {})
    if base is None:
        return {"kept": False, "why": "the default config does not build"}
    seeded = {**defaults, **seeds(model_type, SMALL)}  # held at a seed, if at all
    rows, changes, held, derived_lists = probe(model_type, base, seeded, rng, swap_kinds)
    found = none_sizes(model_type, base, rows, held) if fill_nones else {}
    rows = with_none_sizes(model_type, base, rows, changes, held, found)
    switched = unset_switches(model_type, base, changes, held) if set_nones else []
    rows += switched + lengthened(model_type, base)
    zero_counts([base] + rows)
    zero_switches([base] + rows)
    try:
        return fitted(model_type, cls, defaults, base, rows, changes, held, derived_lists, rng)
    except Unsupported as err:
        err.used = {"fill_nones": bool(found), "swap_kinds": any(
            swaps_kind(base.flat.get(k), v) for k, v in changes.items()), "set_nones": bool(switched)}
        raise


def fitted(model_type, cls, defaults, base, rows, changes, held, derived_lists, rng) -> dict:
    for key in shaping_strings(base, rows, changes):
        held[key] = defaults.get(key)
        rows = [r for r in rows if r.kwargs.get(key) == base.kwargs.get(key)]
        del changes[key]
    patterns = sorted({k[2:] for r in [base] + rows for k in r.q if k.startswith("n:")})
    if {r.embedding for r in [base] + rows} != {base.embedding} or len(
            {r.lm_head for r in [base] + rows} - {None}) > 1:
        raise Unsupported("the embedding or lm_head changes name")
    params_out, counts = [], []
    everywhere = {p for p in patterns if all(r.q.get(f"n:{p}") for r in [base] + rows)}
    larger = {p: [k for k in patterns if k != p and RANKED.sub("*", k) == p] for p in patterns}
    absent = {p: sum(not r.q.get(f"n:{p}") for r in [base] + rows) for p in patterns}
    for pattern in sorted(patterns, key=lambda p: (bool(larger[p]), p not in everywhere, absent[p])):  # a block's
        # smallest shape after its larger ones; those a switch removes last, the rarest last, to reuse
        ranks = {r.q[f"r:{pattern}"] for r in [base] + rows if f"r:{pattern}" in r.q}
        if len(ranks) != 1:
            raise Unsupported(f"{pattern} changes rank")
        if larger[pattern]:  # the block's instances less those of a larger shape (gemma4: L less the double-wide)
            count = fit_quantity(f"t:{pattern}", base, rows) + [
                [-c, term] for p, n, _ in params_out if p in larger[pattern] for c, term in n]
        else:
            count = gated_count(f"n:{pattern}", base, rows, counts) or fit_quantity(f"n:{pattern}", base, rows)
        counts.append(count)
        params_out.append([pattern, count, [fit_quantity(f"d{j}:{pattern}", base, rows) for j in range(ranks.pop())]])
    params_out.sort()
    groups = {k[2:]: fit_quantity(k, base, rows) for k in sorted({k for r in [base] + rows for k in r.q
                                                                   if k.startswith("g:")})}
    derived = {k[2:]: fit_quantity(k, base, rows) for k in sorted(base.q) if k.startswith("a:")}
    attribute_map = dict(cls.attribute_map)
    needed = set().union(*map(shape_templates.reads, derived.values()))
    for _, count, dims in params_out:
        needed |= shape_templates.reads(count)
        for d in dims:
            needed |= shape_templates.reads(d)
    for expr in groups.values():
        needed |= shape_templates.reads(expr)
    needed |= {attribute_map.get(a, a) for a in ARCH if attribute_map.get(a, a) in base.values}
    needed |= {n for n in base.values if n.split("#")[0] in derived_lists}  # checked, if not used
    needed |= list_movers(needed, base, rows, derived_lists)
    defaults_values = variables_of(defaults)
    defaults_values.update({n: shape_templates.given(defaults, n, {}) for n in needed if n.endswith(("#set", "#nz"))})
    rules = variable_rules(needed, base, rows, defaults_values, cls)
    for name, rule in rules.items():
        if name.split("#")[0] in derived_lists:
            rule["check"] = True
    stand_ins(rules, params_out, groups, base, rows)
    fixed = dict(held)
    for key, value in defaults.items():  # a shaping key no formula reads: held at its default
        if key in changes and not any(n.split("#")[0] == key for n in rules):
            moved = [r for r in rows if r.name.startswith(f"{key}=") and r.q != base.q]
            if moved:
                fixed[key] = value
    reads, aliases, patterned = source_reads(model_type, cls, base)
    keys = sorted(set(defaults) | set(attribute_map))
    tpl = {"keys": keys, "attribute_map": attribute_map, "fixed": fixed, "aliases": aliases, "patterns": patterned,
           "reads": [r for r in reads if r not in {k.split(".")[-1] for k in keys}],  # those a key's name says
           "vars": rules, "params": params_out, "groups": groups, "derived": derived, "embedding": base.embedding,
           "lm_head": next((r.lm_head for r in [base] + rows if r.lm_head), None)}
    tpl["kinds"] = {key: sorted({json.dumps(x) for r in [base] + rows for x in r.flat.get(key) or ()}) for key in
                    sorted({n.split("#")[0] for n in rules if '#"' in n})}  # the items its counts know
    tpl["exact"] = even_divisions(tpl, [base] + rows)
    check(model_type, tpl, [base] + rows, "a build it learned from")
    held_out = held_out_rows(model_type, cls, defaults, changes, rng) + resized_new_tensors(model_type, base, rows,
                                                                                            changes)
    check(model_type, tpl, held_out, "a held-out config")
    return {"kept": True, "template": tpl, "held_out": [
        {"variant": r.name, "config": {"model_type": model_type, **r.written}, **r.counts} for r in held_out
        if not r.declined]}


def list_movers(needed, base, rows, derived_lists) -> set:
    """The variables of a key that alone moved a needed list count where transformers derived the list (exaone_moe's
    first_k_dense_replace under mlp_layer_types, lfm2's full_attn_idxs under layer_types: a plain key, or another
    list's length), or a derived value a config's own must agree with (dory's n_recurrent_layers, the layers less
    n_input_layers and n_output_layers): a config leaving it out has it derived from them."""
    out = set()
    for row in rows:
        key = row.name.split("=")[0]
        if row.parent == base.name and "=" in row.name and any(
                n.split("#")[0] not in row.kwargs and row.values.get(n) != base.values.get(n)
                for n in needed if "#" in n or n in derived_lists):
            out |= {n for n in base.values if n == key or n == f"{key}#len"}
    return out


def held_out_rows(model_type, cls, defaults, changes, rng):
    base = first_build(model_type, "held-out base", base_kwargs(cls, defaults, SMALL2))
    if base is None:
        raise Unsupported("the second base does not build")
    rows, keys = [base], sorted(changes)
    for i in range(HELD_OUT * 4):
        if len(rows) > HELD_OUT or not keys:
            break
        chosen = rng.sample(keys, max(1, len(keys) // 3))
        row = try_row(model_type, f"held-out {i}: {', '.join(chosen)}", {**base.kwargs, **{k: changes[k] for k in
                                                                                           chosen}})
        if row is not None:
            rows.append(row)
    moved = [try_row(model_type, f"held-out {key}={items}", {**base.kwargs, key: items})
             for key, items in kinds_moved(base.flat, at=lambda items: (0, len(items) // 2))]  # as the tests move
    for row in moved:
        if row is not None:  # counted right, or left to the meta device (a list checked against its derivation)
            row.may_decline = True
    return rows + shifted_indices(model_type, base, changes) + [r for r in moved if r is not None]


def kind_lists(flat: dict):
    """(key, the list, its kinds) for each list of two or more layer kinds."""
    for key, items in sorted(flat.items()):
        kinds = sorted({x for x in items if isinstance(x, str)}) if isinstance(items, list) else []
        if len(kinds) >= 2 and not shape_templates.HARMLESS.search(key):
            yield key, items, kinds


def kinds_moved(flat: dict, at):
    """(list key, the list) for each list of layer kinds with the entries at `at` each made the next kind."""
    for key, items, kinds in kind_lists(flat):
        for i in at(items):
            moved = list(items)
            moved[i] = next(k for k in kinds if k != items[i])
            yield key, moved


def each_kind_once_more(model_type, base, skip) -> list:
    """A list of layer kinds with each kind once more in it (nemotron_h's one mamba, MoE, attention and MLP layer:
    every probe kept their counts in step, and the MLP was fitted as one per attention layer): in place of a layer of
    a kind it holds twice or more, else as one more layer, so that no kind leaves the list (where one did, the larger
    of a tensor's two shapes changed sides, and mimo_v2_flash's template fitted a width that went wrong from 17 full
    attention layers on). Not a list the probes found held or checked against its derivation (olmo_hybrid's)."""
    out = []
    for key, items, kinds in kind_lists(base.flat):
        if key in skip:
            continue
        for kind in kinds:
            spare = next((j for j, x in enumerate(items) if x != kind and items.count(x) > 1), None)
            extra = {}
            if spare is not None:
                moved = items[:spare] + [kind] + items[spare + 1:]
            else:
                moved, layers = items + [kind], shape_templates.layer_key(key)
                extra = {layers: len(moved)} if base.flat.get(layers) == len(items) else {}
            row = try_row(model_type, f"{key}={moved}", {**base.kwargs, **extra, key: moved})
            if row is not None and row.q != base.q:
                row.parent = base.name
                out.append(row)
    return out


def shifted_indices(model_type, base, changes) -> list:
    """For each list of layer indices, the held-out base with every index one layer on (and with its first index alone,
    one layer on), alone and with each change: a count of the layers it names must still hold where another key
    picks layers by position (flint's mlp_only_layers against decoder_sparse_step: a formula of the two counts fitted
    every build, and missed these)."""
    out = []
    for key, value in sorted(base.flat.items()):
        layers = shape_templates.layer_count(base.flat, key)  # the count its `key#in` reads
        if f"{key}#in" not in base.values or not layers:
            continue
        for shifted in ([(i + 1) % layers for i in value], [(value[0] + 1) % layers]):  # and its first alone
            for other, new in [(None, None)] + sorted(changes.items()):
                extra = {} if other is None or other == key else {other: new}
                row = try_row(model_type, f"held-out {key}={shifted}{' + ' + other if extra else ''}",
                              {**base.kwargs, **extra, key: shifted})
                if row is not None:
                    out.append(row)
    return out


def resized_new_tensors(model_type, base, rows, changes) -> list:
    """The first row holding each tensor the base lacks, with every size changed at once: a tensor a switch adds,
    at sizes no row showed it."""
    sizes = {k: v for k, v in changes.items() if k in base.kwargs}
    out, resized = [], set()
    for pattern in sorted({k for r in rows for k in r.q if k.startswith("n:")} - set(base.q)):
        first = first_holder(pattern, rows)
        if first.name in resized:
            continue
        resized.add(first.name)
        resize = {k: v for k, v in sizes.items() if first.kwargs.get(k) == base.kwargs.get(k)}
        for left in [None, *sorted(resize)]:  # all of them, else all but the one that does not build with it
            row = try_row(model_type, f"resized {first.name}", {**first.kwargs, **{
                k: v for k, v in resize.items() if k != left}})
            if row is not None:
                out.append(row)
                break
    return out


def check(model_type, tpl, rows, what):
    """Each row's config.json as transformers writes it counts as the meta device built it; as a user writes it
    (only the keys set), it counts the same or goes to the meta device (dory's class doubles its layer counts when it
    writes them, and halves them when it reads back its own form)."""
    for row in rows:
        row.written = {"model_type": model_type, **row.written}
        expected = row.measured()
        got = counts_from(model_type, tpl, row.written)
        row.declined = got == {"method": "meta"} and getattr(row, "may_decline", False)
        if got != expected and not row.declined:
            raise Unsupported(f"{what} ({row.name}) counts {got}{why_not(tpl, row)}, the meta device {row.counts}")
        alone = {"model_type": model_type, **unflatten(row.kwargs)}
        got = counts_from(model_type, tpl, alone)
        if got != expected and got != {"method": "meta"}:
            own = built_as_given(row.name, alone)  # where the class reads its keys otherwise than its written form
            if got != own.measured():
                raise Unsupported(f"{what} ({row.name}) as its keys alone counts {got}, the meta device {own.counts}")


def built_as_given(name, raw) -> Row:
    """The model of a config.json as given, not as its class writes it back."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**raw))
    return Row(name, {}, raw, {}, model)


def why_not(tpl, row) -> str:
    """Why the template did not take a config it should have."""
    flat = shape_templates.flatten(row.written)
    for key, value in flat.items():
        if key in tpl["fixed"] and value != tpl["fixed"][key]:
            return f" ({key} held at {str(tpl['fixed'][key])[:60]})"
    unknown = [k for k in flat if k not in tpl["keys"] and k not in tpl["fixed"] and not (
        shape_templates.HARMLESS.search(k) or any(p in shape_templates.IGNORED for p in k.split(".")))]
    if unknown:
        return f" (unknown keys {unknown[:3]})"
    missing = [n for n, r in tpl["vars"].items() if "required" in r and shape_templates.given(
        flat, n, tpl["attribute_map"]) is None]
    if missing:
        return f" (no value for {missing[:3]})"
    saved = dict(shape_templates.templates())
    shape_templates.templates()[row.written.get("model_type", "?")] = tpl
    try:
        found = shape_templates.variables(row.written)
    finally:
        shape_templates.templates().clear()
        shape_templates.templates().update(saved)
    wrong = [(n, v, row.values.get(n)) for n, v in (found[1] if found else {}).items() if v != row.values.get(n)]
    return f" (read {wrong[:3]} as (name, template, config))" if wrong else ""


def counts_from(model_type, tpl, raw):
    """What params.py counts from the config.json with this template in place."""
    saved = dict(shape_templates.templates())
    shape_templates.templates().clear()
    shape_templates.templates()[model_type] = tpl
    params.template_layout.cache_clear()
    try:
        arch = params.from_config(raw, "survey")
        counts = params.count_params(arch)
        if counts.method != "template":
            return {"method": counts.method}
        lay = params.layout(arch)
        _, values, _ = params.template_layout(arch.config_json)  # as the count read them
        return {"total": counts.total, "largest": counts.largest_module, "embedding": lay.embedding,
                "lm_head": lay.lm_head, "active": counts.active, **{
                    f"a:{n}": shape_templates.attribute(tpl, values, n) for n in tpl.get("derived", {})}}
    except Exception as err:  # noqa: BLE001 - reported as the miss it is
        return {"error": f"{type(err).__name__}: {err}"}
    finally:
        shape_templates.templates().clear()
        shape_templates.templates().update(saved)
        params.template_layout.cache_clear()


# ---- driving -----------------------------------------------------------------------------------------------------

# ---- what the model's source reads --------------------------------------------------------------------------------

TRANSFORMERS = Path(transformers.__file__).parent
SHARED = ("modeling_utils.py", "configuration_utils.py", "modeling_rope_utils.py", "activations.py", "pytorch_utils.py")
READ = re.compile(r"config\.(\w+)|(?:getattr|hasattr)\(\s*[\w.]*config\w*\s*,\s*[\"'](\w+)[\"']|"
                  r"kwargs\.(?:pop|get)\(\s*[\"'](\w+)[\"']")
ALIAS = re.compile(r"self\.(\w+)\s*=\s*\(?\s*kwargs\.pop\(\s*[\"'](\w+)[\"']\s*(?:,\s*self\.\1\s*\)|\)\s*if\s*"
                   r"[\"']\2[\"']\s*in\s*kwargs\s*else\s*self\.\1\b)")  # kwargs.pop(alias, self.field), or
# kwargs.pop(alias) if alias in kwargs else self.field (nemotron_h's mamba_n_groups)
POPPED = re.compile(r"kwargs\.pop\(\s*[\"'](\w+)[\"']\s*\)")


def reads_in(texts) -> set:
    return {name for text in texts for match in READ.findall(text) for name in match if name}


def shared_reads() -> list:
    """The config attributes transformers' shared modeling code reads, for any model."""
    return sorted(reads_in((TRANSFORMERS / f).read_text() for f in SHARED))


def model_sources(cls) -> list:
    """The model's own source files (not the modular ones they are generated from), and those of the other model
    folders they import from; the configuration file first."""
    folder = Path(sys.modules[cls.__module__].__file__).parent
    own = sorted((p for p in folder.glob("*.py") if not p.name.startswith("modular_")),
                 key=lambda p: not p.name.startswith("configuration_"))
    texts = [p.read_text() for p in own]
    others = {m for t in texts for m in re.findall(r"from \.\.(\w+)\.", t)} - {folder.name}
    return texts + [p.read_text() for m in sorted(others) for p in (folder.parent / m).glob("*.py")
                    if not p.name.startswith("modular_")]


def source_reads(model_type, cls, base) -> tuple:
    """(every config attribute the model's code reads, and every lowercase word of its configuration file; the older
    names its config class takes in place of a field, where a build confirms it)."""
    texts = model_sources(cls)
    reads = reads_in(texts) | set(re.findall(r"\b[a-z][a-z0-9_]*\b", texts[0]))
    aliases = {}
    for field, alias in ALIAS.findall(texts[0]):
        value = base.flat.get(field)
        if not isinstance(value, int):
            continue
        new = (not value) if isinstance(value, bool) else value + 8
        row = try_row(model_type, f"{alias}={new}", {**base.kwargs, alias: new})
        if row is not None and row.flat.get(field) == new:
            aliases[alias] = field
    return sorted(reads), aliases, pattern_aliases(model_type, texts[0], base)


def pattern_aliases(model_type, source: str, base) -> dict:
    """A string an older config.json carries in place of a per-layer list, one character a layer (nemotron_h's
    hybrid_override_pattern "M-M*-E": mamba, MLP, attention, MoE layers): alias -> [the list's key, {character:
    kind}], each character built alone once. The class converts it only where the list is not given."""
    out = {}
    chars = sorted(set(re.findall(r"[\"']([^\w\s\"'\\]|[A-Z])[\"']", source)))  # one-character literals
    for alias in sorted(set(POPPED.findall(source)) - set(base.flat)):
        kinds, field = {}, None
        for char in chars:
            row = try_row(model_type, f"{alias}={char * 2}", {**base.kwargs, alias: char * 2})
            moved = [k for k, v in (row.flat.items() if row else ()) if isinstance(v, list) and len(v) == 2 and
                     len(set(map(json.dumps, v))) == 1 and isinstance(v[0], str) and v != base.flat.get(k)]
            if len(moved) == 1 and field in (None, moved[0]):
                field, kinds[char] = moved[0], row.flat[moved[0]][0]
        if field and len(kinds) > 1:
            out[alias] = [field, kinds]
    return out


def on_alarm(signum, frame):
    raise TimeoutError()


def survey_one(model_type: str) -> tuple:
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    signal.signal(signal.SIGALRM, on_alarm)
    shape_templates.survey()["shared_reads"] = shared_reads()
    signal.alarm(SECONDS_PER_TYPE)
    try:
        result = survey(model_type, random.Random(model_type))
    except Unsupported as err:
        result = {"kept": False, "why": str(err)[:300]}
    except TimeoutError:
        result = {"kept": False, "why": f"took over {SECONDS_PER_TYPE} s"}
    except Exception as err:  # noqa: BLE001 - one model_type's surprise must not end the survey
        result = {"kept": False, "why": f"{type(err).__name__}: {str(err)[:200]}"}
    finally:
        signal.alarm(0)
    print(f"{model_type:32} {'kept' if result['kept'] else '-':5} {result.get('why', '')[:150]}", flush=True)
    return model_type, result


def main(argv) -> None:
    update = argv[:1] == ["--update"]
    argv = argv[1:] if update else argv
    written_out = set(params.FAST_TYPES) | set(by_hand.FAMILIES)
    todo = argv or sorted(t for t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if t not in written_out)
    with multiprocessing.Pool(2, maxtasksperchild=8) as pool:
        results = dict(pool.imap_unordered(survey_one, todo))
    print(f"{sum(r['kept'] for r in results.values())} of {len(results)} model_types have a shape template")
    if argv and not update:
        return
    if update:  # the other types as the last survey left them (it must have run with this transformers)
        templates, data = json.loads(TEMPLATES.read_text()), json.loads(DATA.read_text())
        if templates["transformers"] != transformers.__version__:
            raise SystemExit("the last survey ran with another transformers: run the whole survey")
        old = {t: {**r, "template": templates["types"].get(t)} for t, r in data["model_types"].items()}
        results = {**old, **results}
    kept = sorted(t for t, r in results.items() if r["kept"])
    TEMPLATES.write_text(json.dumps({"transformers": transformers.__version__, "shared_reads": shared_reads(),
                                     "types": {t: results[t]["template"] for t in kept}}, sort_keys=True) + "\n")
    DATA.write_text(json.dumps({"transformers": transformers.__version__, "model_types": {
        t: {k: v for k, v in r.items() if k != "template"} for t, r in sorted(results.items())}}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
