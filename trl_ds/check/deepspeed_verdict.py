"""DeepSpeed's own verdict on ds_config.json, in the launching process, before any rank starts.

`DeepSpeedConfig` runs every pydantic class of the JSON and DeepSpeed's cross-key assertions. It costs the deepspeed
import, so it runs only when the config holds something beyond trl_ds's own keys. Top-level keys are no pydantic
class: the names DeepSpeed looks up are recorded (`judge`), and a deepspeed.NAME it never read is refused with the
closest one it did.
"""
import difflib
import functools
import io
import logging
from contextlib import contextmanager, redirect_stdout
from typing import Any, List, Optional

from omegaconf import OmegaConf

from trl_ds.check.deepspeed_keys import passthrough, show
from trl_ds.config.deepspeed_names import deepspeed_version


class _World:
    """DeepSpeed's config asks the process group for the world size; none exists before launch."""

    def __init__(self, world: int):
        self.world = world

    def get_rank(self) -> int:
        return 0

    def get_world_size(self, group=None) -> int:
        return self.world


class _Keys:
    def __init__(self, owner: "_Recording"):
        self.owner = owner

    def __contains__(self, key) -> bool:
        return self.owner.__contains__(key)

    def __iter__(self):
        return iter(dict.keys(self.owner))

    def __len__(self) -> int:
        return dict.__len__(self.owner)


class _Recording(dict):
    """A block of the JSON noting every dotted name DeepSpeed looks up in it (nested blocks too)."""

    def __init__(self, data: dict, path: str = "", read: Optional[dict] = None):
        # one record shared by every block; a dict keeps the order, so an error can name the last name read
        self.path, self.read = path, {} if read is None else read
        super().__init__({k: _Recording(v, f"{path}{k}.", self.read) if isinstance(v, dict) else v
                          for k, v in data.items()})

    def _note(self, key):
        self.read.pop(f"{self.path}{key}", None)
        self.read[f"{self.path}{key}"] = None

    def get(self, key, *default):
        self._note(key)
        return super().get(key, *default)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)

    def keys(self):
        return _Keys(self)

    def __iter__(self):  # overridden, so `**block` (pydantic blocks) goes through keys() and [] and is recorded
        return iter(dict.keys(self))


def _read_key_by_key(name: str, read: dict) -> bool:
    """DeepSpeed looked names up in this block one by one (else a pydantic class took it whole)."""
    block = name.rpartition(".")[0]
    return not block or any(r.startswith(f"{block}.") for r in read)


def leaves(block: dict, path: str = "") -> List[str]:
    """Dotted names of every value in a nested dict."""
    out = []
    for k, v in block.items():
        out += leaves(v, f"{path}{k}.") if isinstance(v, dict) and v else [f"{path}{k}"]
    return out


def needs_verdict(cfg) -> bool:
    return any(v not in ({}, None) for v in passthrough(cfg).values())


def deepspeed_verdict(cfg, ds_config: dict, world: int) -> List[str]:
    """[] when DeepSpeed accepts ds_config for `world` ranks; else one line per problem, naming trl_ds's key."""
    from pydantic import ValidationError

    version = deepspeed_version()
    error, read = judge(ds_config, world)
    if isinstance(error, ValidationError):
        return [_pydantic_line(error.title, e, version) for e in error.errors()]
    if error is not None:
        last = f" (the last key it read: {next(reversed(read))})" if read else ""
        return [f"DeepSpeed {version} refuses ds_config.json: {type(error).__name__}: {error}{last}. Fix the key it "
                f"names (docs/deepspeed-keys.md lists where each one is set)."]
    given = OmegaConf.to_container(cfg.deepspeed) if cfg.deepspeed else {}
    unread = [name for name in leaves(given) if name not in read and _read_key_by_key(name, read)]
    return [_unread_line(name, OmegaConf.select(cfg.deepspeed, name), sorted(read), version) for name in unread]


@functools.lru_cache(maxsize=1)
def top_level_reads() -> frozenset:
    """The top-level names DeepSpeedConfig looks up; others in a file users bring are never read."""
    read = judge({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1}, 1)[1]
    return frozenset(k for k in read if "." not in k)


def judge(ds_config: dict, world: int):
    """(DeepSpeed's exception or None, every dotted name its DeepSpeedConfig looked up) for ds_config."""
    with quiet_accelerator_probe():
        import deepspeed.runtime.config as ds_runtime_config

    recording = _Recording(ds_config)
    saved = ds_runtime_config.dist
    ds_runtime_config.dist = _World(world)
    try:
        with redirect_stdout(io.StringIO()):  # DeepSpeed logs its config checks to stdout
            ds_runtime_config.DeepSpeedConfig(recording)
    except Exception as err:  # whatever DeepSpeed raises on a user's value (a number for a block: AttributeError)
        return err, recording.read
    finally:
        ds_runtime_config.dist = saved
    return None, recording.read


class _NotTheProbe(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Setting accelerator to CPU" not in record.getMessage()


@contextmanager
def quiet_accelerator_probe():
    """Importing deepspeed probes for a GPU, and without one its logger warns "Setting accelerator to CPU" on stdout:
    noise in a launcher that checks a config (a refusal prints trl_ds's lines only). Ranks import it themselves."""
    logger, probe = logging.getLogger("DeepSpeed"), _NotTheProbe()  # deepspeed/utils/logging.py's logger name
    logger.addFilter(probe)
    try:
        yield
    finally:
        logger.removeFilter(probe)


def _pydantic_line(title: str, error: dict, version: str) -> str:
    loc = [str(p) for p in error.get("loc", ())]
    if not loc:  # a rule across the block's keys (a model validator)
        return (f"DeepSpeed {version} refuses ds_config.json's {BLOCKS.get(title, title)} ({title}: "
                f"{error.get('msg', 'invalid')}). docs/deepspeed-keys.md lists where each of its keys is set.")
    key = trl_ds_key(title, loc)
    given = f"={show(error['input'])}" if "input" in error and not isinstance(error["input"], dict) else ""
    return (f"{key}{given}: DeepSpeed {version} refuses it ({title}: {error.get('msg', 'invalid')}). Fix or remove "
            f"{key}.")


BLOCKS = {"DeepSpeedZeroConfig": "zero_optimization", "DeepSpeedBF16Config": "bf16", "ZenFlowConfig": "zenflow",
          "DeepSpeedZeroOffloadOptimizerConfig": "offload_optimizer",
          "DeepSpeedZeroOffloadParamConfig": "offload_param"}


def trl_ds_key(title: str, loc: List[str]) -> str:
    """The override that set a key DeepSpeed's class `title` refused at `loc` (relative to that class)."""
    if title == "DeepSpeedZeroConfig" and loc:
        if loc[0] in ("offload_optimizer", "offload_param"):
            return ".".join(["offload"] + loc[1:])
        return ".".join(["zero"] + loc)
    if title in ("DeepSpeedZeroOffloadOptimizerConfig", "DeepSpeedZeroOffloadParamConfig"):
        return ".".join(["offload"] + loc)
    if title == "ZenFlowConfig":
        return ".".join(["zero.zenflow"] + loc)
    if title == "DeepSpeedBF16Config":
        return ".".join(["precision"] + loc)
    if title in NAMED_BLOCKS:  # built from the block's own keys (CompileConfig(**param_dict["compile"])): loc is inside
        return ".".join(["deepspeed", NAMED_BLOCKS[title]] + loc)
    return ".".join(["deepspeed"] + loc)  # a top-level block handed whole to its class: loc starts at its name


# The classes DeepSpeed 0.19.8's DeepSpeedConfig builds from one block's keys (runtime/config.py, comm/config.py,
# utils/config.py), so pydantic's loc omits the block: axolotl's compile.disable was named deepspeed.disable.
NAMED_BLOCKS = {"CompileConfig": "compile", "HybridEngineConfig": "hybrid_engine", "CommsLoggerConfig": "comms_logger",
                "DeepSpeedThroughputTimerConfig": "timers.throughput"}


def _unread_line(name: str, given: Any, known: List[str], version: str) -> str:
    """A name DeepSpeed never looked up; the closest it did look up in the same block is the suggestion."""
    block, _, key = name.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == block]
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
    prefix = f"deepspeed.{block}." if block else "deepspeed."
    fix = f"Did you mean {prefix}{close[0]}?" if close else "Remove it (docs/deepspeed-keys.md)."
    return (f"deepspeed.{name}={show(given)}: DeepSpeed {version} never reads {name} (it would be ignored). {fix}")
