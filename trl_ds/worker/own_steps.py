"""After a ZeRO-3 engine loads a universal checkpoint, each optimizer sub-group gets its own Adam step count.

DeepSpeed 0.19.8's stage-3 universal load (stage3.py load_hp_checkpoint_state_from_checkpoint_dir_stage3) gives every
sub-group the same `step` object, read once from the checkpoint. torch's AdamW (the optimizer DeepSpeed builds on CPU
ranks) increments `state["step"]` in place, so with n sub-groups per rank the shared count advanced n times per
optimizer step after a converted resume, and the bias correction went wrong from the first update on (the losses
parted from the uninterrupted run's at the second step after the resume, by 0.025 at the third, with ten sub-groups).
"""
import torch
from transformers import TrainerCallback


def own_steps(optimizer) -> int:
    """Give every state whose `step` tensor another state shares a copy of its own; how many were copied. Walks the
    wrappers (accelerate's, DeepSpeed's ZeRO optimizer) down to the optimizer that holds the states."""
    seen, copied, depth = set(), 0, 0
    while optimizer is not None and depth < 4:
        for state in getattr(optimizer, "state", {}).values():
            step = state.get("step") if isinstance(state, dict) else None
            if torch.is_tensor(step) and id(step) in seen:
                state["step"] = step.clone()
                copied += 1
            elif torch.is_tensor(step):
                seen.add(id(step))
        optimizer, depth = getattr(optimizer, "optimizer", None), depth + 1
    return copied


class OwnAdamSteps(TrainerCallback):
    """Runs once the checkpoint is loaded: transformers loads it before on_train_begin."""

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        own_steps(optimizer)
