"""After a ZeRO-3 engine loads a universal checkpoint, each optimizer sub-group gets its own Adam step count.

DeepSpeed's stage-3 universal load gives every sub-group the same `step` object; torch's AdamW increments it in
place, so with n sub-groups it advanced n times per optimizer step and the bias correction went wrong after a
converted resume.
"""
import torch
from transformers import TrainerCallback


def own_steps(optimizer) -> int:
    """Give every state whose `step` tensor another shares its own copy (through the wrappers); how many."""
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
