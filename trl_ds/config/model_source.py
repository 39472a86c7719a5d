"""Where a model's architecture comes from: the config.json of `model.config_path`, of the folder or hub id in
`model.name_or_path`, or the preset's dimensions (`model.dimensions_of` names the hub model they spell out).

A hub id's config.json is read from the local Hugging Face cache (works with HF_HUB_OFFLINE=1); otherwise only
config.json is downloaded, once one quick connect says the Hub can be reached. Plain JSON: no torch.
"""
import json
import os
from dataclasses import dataclass
from typing import Optional

from trl_ds.errors import ConfigError

DIM_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
FIX = ("Give a folder written by save_pretrained (model.name_or_path=/path/to/model) or the model's config.json "
       "(model.config_path=/path/to/config.json).")


@dataclass(frozen=True)
class ModelSource:
    name: str  # what the output calls the model: the hub id, the folder, or the preset
    config: Optional[dict]  # the config.json's content; None: the preset's own dimensions
    where: str  # "config.json of ..." or "preset model=..."


def is_local_path(path: str) -> bool:
    return path.startswith(("/", ".", "~")) or os.path.isdir(os.path.expanduser(path))


def uses_preset(model_cfg) -> bool:
    """The preset's own dimensions describe the model: the tiny model, or the preset's own hub id."""
    name_or_path = model_cfg.get("name_or_path")
    return not model_cfg.get("config_path") and (not name_or_path or name_or_path == model_cfg.get("dimensions_of"))


def display_name(model_cfg) -> str:
    """What the output calls the model: the preset, else the folder, hub id or config.json named."""
    if uses_preset(model_cfg):
        return model_cfg.name
    return model_cfg.get("name_or_path") or model_cfg.config_path


def preset_config(model_cfg) -> dict:
    """A preset's dimensions as the config.json they stand for (its `extra` block adds family keys)."""
    raw = {k: model_cfg[k] for k in ("model_type", *DIM_KEYS, "num_key_value_heads", "tie_word_embeddings",
                                     "attention_bias")}
    extra = model_cfg.get("extra") or {}
    return {**raw, **{k: (list(v) if hasattr(v, "__iter__") and not isinstance(v, str) else v)
                      for k, v in extra.items()}}


def model_source(model_cfg) -> ModelSource:
    """The one place that decides which dimensions describe the model (see the module docstring)."""
    config_path, name_or_path = model_cfg.get("config_path"), model_cfg.get("name_or_path")
    name = display_name(model_cfg)
    if uses_preset(model_cfg):
        return ModelSource(name, None, f"preset model={model_cfg.name}")
    if config_path:
        return ModelSource(name, read_json(config_path, f"model.config_path={config_path}"),
                           f"config.json at {config_path}")
    if is_local_path(name_or_path):
        return ModelSource(name, read_json(name_or_path, f"model.name_or_path={name_or_path}"),
                           f"config.json in {name_or_path}")
    file = hub_config_file(name_or_path)
    return ModelSource(name, read_json(file, f"model.name_or_path={name_or_path}"),
                       f"config.json of hub model {name_or_path} ({file})")


def read_json(path: str, key: str) -> dict:
    """A config.json (a file, or a folder holding one) as a dict, or ConfigError naming the override and the fix."""
    expanded = os.path.expanduser(path)
    file = os.path.join(expanded, "config.json") if os.path.isdir(expanded) else expanded
    try:
        with open(file) as f:
            raw = json.load(f, object_hook=special_floats)
    except (OSError, ValueError) as err:
        raise ConfigError([f"{key} cannot be read as a model's config.json ({err}). {FIX}"]) from None
    if not isinstance(raw, dict) or not raw.get("model_type"):
        raise ConfigError([f"{key}: {file} has no model_type, so the architecture is unknown. {FIX}"])
    return raw


def special_floats(obj: dict):
    """Infinity and NaN as transformers writes them since v5 ({"__float__": "Infinity"}), read back as floats, as
    its own from_pretrained does (nemotron_h's time_step_limit: the tagged form fails its config's validation)."""
    return float(obj["__float__"]) if obj.keys() == {"__float__"} else obj


def hub_config_file(repo_id: str) -> str:
    """The cached config.json of a hub model, downloading only that file when the network is allowed."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(repo_id, "config.json")
    except HFValidationError as err:
        raise ConfigError([f"model.name_or_path={repo_id} is neither a local folder nor a hub id ({err}). {FIX}"]
                          ) from None
    if isinstance(cached, str):
        return cached
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    if offline:
        raise ConfigError([f"model.name_or_path={repo_id}: its config.json is not in the Hugging Face cache and "
                           f"HF_HUB_OFFLINE=1 forbids downloading it, so the architecture is unknown. Download it "
                           f"first (hf download {repo_id} config.json), or {FIX[0].lower()}{FIX[1:]}"])
    unreachable = hub_unreachable()
    if unreachable:
        raise ConfigError([f"model.name_or_path={repo_id}: its config.json is not in the Hugging Face cache and the "
                           f"Hub cannot be reached ({unreachable}), so the architecture is unknown. Download it where "
                           f"there is network (hf download {repo_id} config.json), or {FIX[0].lower()}{FIX[1:]}"])
    try:
        return hf_hub_download(repo_id, "config.json")
    except Exception as err:  # network, authentication, missing repo: all mean "architecture unknown"
        raise ConfigError([f"model.name_or_path={repo_id}: its config.json could not be downloaded "
                           f"({type(err).__name__}: {str(err).splitlines()[0][:200]}), so the architecture is "
                           f"unknown. {FIX}"]) from None


PROBE_SECONDS = 3.0


def hub_unreachable() -> Optional[str]:
    """Why the Hub (HF_ENDPOINT, or its HTTPS proxy) cannot be reached, or None: one TCP connect, not five retries."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    endpoint = urlparse(constants.ENDPOINT)
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    target = urlparse(proxy if proxy and "://" in proxy else f"http://{proxy}") if proxy else endpoint
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        socket.create_connection((target.hostname, port), timeout=PROBE_SECONDS).close()
    except OSError as err:
        return f"{'proxy ' if proxy else ''}{target.hostname}:{port}: {err.strerror or err}"
    return None
