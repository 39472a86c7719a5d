"""CLI processes that compose a config, answer and exit: no cyclic garbage collection.

Hydra's composition allocates some 100k small objects and the process frees them all when it ends. The collector's
passes while composing, and its final pass over everything at interpreter teardown, cost about 0.1 s of a 0.6 s dry
run; nothing is gained by them in a process that is about to end. `resume()` turns collection back on for a process
that goes on for hours (the launcher watching its ranks).
"""
import atexit
import gc


def pause_collection() -> None:
    gc.disable()
    atexit.register(gc.freeze)  # what is alive at exit is not swept object by object at teardown


def resume_collection() -> None:
    gc.enable()
