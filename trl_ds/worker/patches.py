"""Every patch trl_ds makes to transformers' and TRL's classes, in one place, each applied only where the installed
version is the one it was written against (WRITTEN_FOR): another version is refused in one line before anything is
patched. torch's op loader is patched in trl_ds/op_locks.py, guarded alike.

On a rank running a user's script: TrainingArguments.__post_init__, Trainer.__init__ and Trainer.train (recording,
resume), HfArgumentParser.parse_dict. In the parser check: every HfArgumentParser and TrlParser entry and
Trainer.__init__ stop the script once it parsed, and TrainingArguments.world_size is the launch's."""
import dataclasses
import functools
import json
from importlib import metadata

WRITTEN_FOR = {"transformers": "5.24", "trl": "1.16"}  # major.minor each patch below was written against


class PatchRefused(SystemExit):
    """The installed transformers or TRL is not the version trl_ds's patches were written for (exit code 2)."""


def guard(what: str, installed=None) -> None:
    """Refuse, in one line, to patch `what` under another version than WRITTEN_FOR's."""
    for name, written in WRITTEN_FOR.items():
        version = (installed or {}).get(name) or metadata.version(name)
        if ".".join(version.split(".")[:2]) != written:
            print(f"trl_ds: refusing to patch {what}: written for {name} {written}.x, this environment has {name} "
                  f"{version}. Install {name}~={written}.0 (pyproject's pin).", flush=True)
            raise PatchRefused(2)


class Parsed(BaseException):
    """Raised once the parser returned (a BaseException: the script's `except Exception` cannot catch it)."""


def install_recording(recorder) -> None:
    """A rank running a user's script: its trainers adopt the configured state and record into the run dir."""
    import transformers

    guard("TrainingArguments.__post_init__ and Trainer.__init__/train")
    use_configured_state(transformers.TrainingArguments)
    record_trainers(transformers.Trainer, recorder)


def use_configured_state(cls) -> None:
    original = cls.__post_init__

    @functools.wraps(original)
    def post_init(self):
        self.accelerator_config = with_configured_state(self.accelerator_config)
        original(self)

    cls.__post_init__ = post_init


def with_configured_state(config):
    """accelerator_config in any form TrainingArguments takes (None, a dict, a JSON file, the object), plus the flag."""
    if config is None:
        return {"use_configured_state": True}
    if isinstance(config, str):
        with open(config) as f:
            config = json.load(f)
    if isinstance(config, dict):
        return {**config, "use_configured_state": True}
    config.use_configured_state = True
    return config


def record_trainers(cls, recorder) -> None:
    original_init, original_train = cls.__init__, cls.train

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        for callback in recorder.callbacks(self):
            self.add_callback(callback)

    @functools.wraps(original_train)
    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint is None:  # the script's own choice (a path, True, False) is kept
            resume_from_checkpoint = recorder.resume_point(self)
        return original_train(self, resume_from_checkpoint, *args, **kwargs)

    cls.__init__, cls.train = init, train


def as_the_ranks_see_it(cfg) -> None:
    """The check is one process, the launch several: arguments derived from the world size (GRPO's and RLOO's
    generation_batch_size) are judged at the launch's world size, as each rank will derive them."""
    import transformers

    from trl_ds.config.values import world_size

    guard("TrainingArguments.world_size")
    world = world_size(cfg)
    transformers.TrainingArguments.world_size = property(lambda self: world)


def stop_after_parsing(parsed: list) -> None:
    """Every way HfArgumentParser and TrlParser return arguments raises Parsed once they have, with what they returned
    in `parsed`; a Trainer being built raises it too (a script that parses some other way never trains here). Calls
    inside the outer one (parse_yaml_file's parse_dict, TrlParser's parse_args_into_dataclasses) return as usual."""
    import transformers
    from trl import TrlParser

    guard("HfArgumentParser, TrlParser and Trainer.__init__ (the parser check)")

    def stopping(original):
        def call(self, *args, **kwargs):
            outer = not getattr(self, "_trl_ds_parsing", False)
            self._trl_ds_parsing = True
            try:
                result = original(self, *args, **kwargs)
            finally:
                self._trl_ds_parsing = not outer
            if outer:
                parsed.append(result)
                raise Parsed
            return result
        return call

    parser = transformers.HfArgumentParser
    for name in ("parse_args_into_dataclasses", "parse_dict", "parse_json_file", "parse_yaml_file"):
        setattr(parser, name, stopping(getattr(parser, name)))
    TrlParser.parse_args_and_config = stopping(TrlParser.parse_args_and_config)

    def no_trainer(self, *args, **kwargs):
        raise Parsed

    transformers.Trainer.__init__ = no_trainer


def under_its_own_values(ours: dict) -> None:
    """A script that parses only its own file or dict (they read no flags) gets trl_ds's training arguments under its
    own values: HfArgumentParser's parse_dict, which the file parsers call, is given ours first. Its own `deepspeed`
    is refused before launch."""
    import transformers

    guard("HfArgumentParser.parse_dict")
    original = transformers.HfArgumentParser.parse_dict

    def parse_dict(self, args, allow_extra_keys=False):
        fields = {f.name for dtype in self.dataclass_types for f in dataclasses.fields(dtype)}
        return original(self, {**{k: v for k, v in ours.items() if k in fields}, **args}, allow_extra_keys)

    transformers.HfArgumentParser.parse_dict = parse_dict
