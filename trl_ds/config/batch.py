"""Batch arithmetic: global batch = micro-batch per rank × world size × gradient accumulation steps."""
from dataclasses import dataclass
from typing import List, Optional

from trl_ds.errors import ConfigError


@dataclass(frozen=True)
class Batch:
    micro: int  # trainer.per_device_train_batch_size
    world: int  # ranks, owned by the cluster
    accumulation: int  # trainer.gradient_accumulation_steps, derived when batch.global_size is set

    @property
    def global_size(self) -> int:
        return self.micro * self.world * self.accumulation


def resolve_batch(micro: int, world: int, accumulation: Optional[int], global_size: Optional[int]) -> Batch:
    """Derive the missing value, or explain which values would work."""
    problems = [f"{name}={value} must be a positive integer."
                for name, value in [("trainer.per_device_train_batch_size", micro),
                                    ("trainer.gradient_accumulation_steps", accumulation),
                                    ("batch.global_size", global_size)]
                if value is not None and value < 1]
    if problems:
        raise ConfigError(problems)
    if global_size is None:
        return Batch(micro, world, accumulation or 1)
    per_step = micro * world
    if accumulation is not None:
        if per_step * accumulation != global_size:
            raise ConfigError([
                f"batch.global_size={global_size} but trainer.per_device_train_batch_size={micro} × world {world} "
                f"× trainer.gradient_accumulation_steps={accumulation} = {per_step * accumulation}. "
                f"Drop trainer.gradient_accumulation_steps (it is derived from batch.global_size) "
                f"or set batch.global_size={per_step * accumulation}."])
        return Batch(micro, world, accumulation)
    if global_size % per_step:
        raise ConfigError([
            f"batch.global_size={global_size} is not divisible by trainer.per_device_train_batch_size={micro} "
            f"× world {world} = {per_step}. {_suggest(global_size, micro, world)}"])
    return Batch(micro, world, global_size // per_step)


def _suggest(global_size: int, micro: int, world: int) -> str:
    micros: List[int] = [m for m in range(1, global_size // world + 1) if global_size % (m * world) == 0]
    fix = []
    if micros:
        nearest = min(micros, key=lambda m: (abs(m - micro), -m))
        fix.append(f"trainer.per_device_train_batch_size={nearest}")
    per_step = micro * world
    fix.append(f"batch.global_size={max(per_step, round(global_size / per_step) * per_step)}")
    return "Set " + " or ".join(fix) + "."
