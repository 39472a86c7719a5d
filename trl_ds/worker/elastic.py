"""An elastic launch (launcher.min_nodes) may start with fewer ranks than the run was built for: the rank then
accumulates more micro-batches per step, so the global batch, and the loss curve, stay what the config says
(check/rendezvous.py made sure every possible node count splits it evenly)."""
from typing import Optional


def accumulation_for_world(ds: dict, planned_world: int, world: int) -> Optional[int]:
    """The accumulation steps that keep ds's global batch with `world` ranks; None when the world is as planned."""
    if world == planned_world:
        return None
    sp = ds.get("sequence_parallel_size", 1)
    micro, accumulation = ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]
    global_size = micro * accumulation * planned_world // sp
    per_step = micro * world // sp
    if global_size % per_step:
        raise RuntimeError(f"world size {world} cannot keep the global batch {global_size} (micro-batch {micro}); "
                           f"the launch checks launcher.min_nodes against it, so this is a bug")
    return global_size // per_step


def fit_to_world(args: dict, ds: dict, planned_world: int, world: int) -> Optional[str]:
    """Set the accumulation in the trainer args and the DeepSpeed dict for `world` ranks; the line to log, if any."""
    accumulation = accumulation_for_world(ds, planned_world, world)
    if accumulation is None:
        return None
    before = ds["gradient_accumulation_steps"]
    args["gradient_accumulation_steps"] = ds["gradient_accumulation_steps"] = accumulation
    return (f"trl_ds: {world} of {planned_world} planned ranks joined (launcher.min_nodes): accumulating "
            f"{accumulation} micro-batches per step instead of {before} keeps the global batch")
