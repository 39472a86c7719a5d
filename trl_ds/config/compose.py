"""Where the Hydra config tree is: inside the package when installed (trl_ds/conf), else the repo's conf/."""
import os

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = next(p for p in (os.path.join(_PACKAGE, "conf"), os.path.join(os.path.dirname(_PACKAGE), "conf"))
                  if os.path.isdir(p))
