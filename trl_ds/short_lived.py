"""Processes that end soon: no cyclic garbage collection they do not need.

Python's last act at exit is a full collection over every object still alive, slow after importing torch and
transformers; freezing what is alive at exit skips it (atexit handlers and stream flushes still run).
`resume_collection()` turns collection back on for a process that goes on for hours (the launcher watching ranks)."""
import atexit
import gc


def skip_final_collection() -> None:
    atexit.register(gc.freeze)  # runs after the atexit handlers registered later (LIFO), before teardown


def pause_collection() -> None:
    gc.disable()
    skip_final_collection()


def resume_collection() -> None:
    gc.enable()
