"""The one composition of a run's config: conf/ (YAML presets) merged into the typed schema, with overrides.

`trl-ds run` composes through `@hydra.main` on CONFIG_DIR (which also makes the run dir and runs sweeps); every other
entry point calls `compose`, with the same CONFIG_DIR and schema, making nothing on disk.
"""
import copy
import functools
import os
from typing import Sequence, Tuple

from trl_ds.errors import ConfigError

# Inside the package when installed (setuptools ships conf/ as trl_ds/conf), else the repo's conf/ beside trl_ds/.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = next(p for p in (os.path.join(_PACKAGE, "conf"), os.path.join(os.path.dirname(_PACKAGE), "conf"))
                  if os.path.isdir(p))
CONFIG_NAME = "config"
HYDRA_VERSION_BASE = "1.3"


def compose(overrides: Sequence[str] = ()):
    """The typed config `trl-ds run OVERRIDES` would see. A composition mistake raises ConfigError: a misspelt key
    (with or without `+`) with the closest real name, an unknown option or a wrong type with Hydra's own message.
    Each call gets its own copy: callers set values on it (the planner's rows, auto-fit)."""
    return copy.deepcopy(_composed(tuple(overrides)))


@functools.lru_cache(maxsize=64)
def _composed(overrides: Tuple[str, ...]):
    """One composition per distinct override list in a process (the planner and auto-fit compose the same again)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from trl_ds.config.schema import register

    register()
    GlobalHydra.instance().clear()  # a composition left open by a caller would make initialize_config_dir refuse
    from trl_ds.config.undeclared_keys import as_added, check_undeclared_keys

    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=HYDRA_VERSION_BASE):
            cfg = hydra_compose(config_name=CONFIG_NAME, overrides=as_added(overrides))
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError([str(err).strip()]) from None
    problems = check_undeclared_keys(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg
