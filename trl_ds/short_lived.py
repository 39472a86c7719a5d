"""Processes that end soon: no cyclic garbage collection they do not need.

Python's last act at exit is a full collection over every object still alive, one by one. For a rank that has
imported torch, transformers, DeepSpeed and TRL that pass took 1.9 s of a 13 s tiny run here (ranks end 2.7 s after
their last line, 0.8 s with it skipped); for a CLI process that composed a Hydra config, 0.07 s of a 0.6 s dry run,
plus ~0.03 s of collections while composing. Freezing what is alive at exit skips the pass; atexit handlers and
stream flushes still run. `resume_collection()` turns collection back on for a process that goes on for hours
(the launcher watching its ranks).
"""
import atexit
import gc


def skip_final_collection() -> None:
    atexit.register(gc.freeze)  # runs after the atexit handlers registered later (LIFO), before teardown


def pause_collection() -> None:
    gc.disable()
    skip_final_collection()


def resume_collection() -> None:
    gc.enable()
