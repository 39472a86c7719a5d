"""A rank keeps bitsandbytes out unless its run quantizes the base: transformers and peft then find it absent (both
ask importlib.util.find_spec, and peft's `import bitsandbytes` is guarded by `except ImportError`)."""
import importlib.util
import sys

import pytest

from tests.conftest import require
from trl_ds.worker.unused_packages import keep_out_unused_packages


@pytest.fixture
def restored_modules():
    saved = sys.modules.get("bitsandbytes", "absent")
    yield
    sys.modules.pop("bitsandbytes", None)
    if saved != "absent":
        sys.modules["bitsandbytes"] = saved


@pytest.mark.parametrize("peft, seen", [
    ("name: none\n  load_in_4bit: false\n  load_in_8bit: false", False),
    ("name: lora\n  load_in_4bit: false\n  load_in_8bit: true", True),
    ("name: qlora\n  load_in_4bit: true\n  load_in_8bit: false", True),
])
def test_bitsandbytes_is_seen_only_by_a_quantized_run(tmp_path, restored_modules, peft, seen):
    installed = importlib.util.find_spec("bitsandbytes") is not None
    require(installed, "bitsandbytes is not installed (make test installs it)")
    sys.modules.pop("bitsandbytes", None)
    (tmp_path / "config.yaml").write_text(f"peft:\n  {peft}\n")
    keep_out_unused_packages(str(tmp_path))
    assert (importlib.util.find_spec("bitsandbytes") is not None) is seen
    if not seen:
        with pytest.raises(ImportError):
            import bitsandbytes  # noqa: F401
