"""A rank keeps bitsandbytes out unless its run quantizes the base: transformers and peft then find it absent (both
ask importlib.util.find_spec, and peft's `import bitsandbytes` is guarded by `except ImportError`). And it keeps
DeepSpeed's Muon module (whose import compiles kernels with TorchInductor) out unless ds_config.json names Muon."""
import importlib.util
import json
import subprocess
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
    (tmp_path / "ds_config.json").write_text(json.dumps({"optimizer": {"type": "Muon"}}))  # no stand-in installed
    keep_out_unused_packages(str(tmp_path))
    assert (importlib.util.find_spec("bitsandbytes") is not None) is seen
    if not seen:
        with pytest.raises(ImportError):
            import bitsandbytes  # noqa: F401


IMPORT_MUON = """
import sys
sys.modules["bitsandbytes"] = None  # as the worker's rank (peft imports TorchInductor through it)
from trl_ds.worker.unused_packages import skip_muon
skip_muon(sys.argv[1])
from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam  # as DeepSpeed's engine does at its start
import torch
assert not isinstance(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]), MuonWithAuxAdam)
print(MuonWithAuxAdam.__module__, "torch._inductor.compile_fx" in sys.modules)
"""


@pytest.mark.slow  # two fresh interpreters importing DeepSpeed: make test runs it, make test-fast does not
@pytest.mark.parametrize("optimizer, muon_class_from, inductor_imported", [
    ("AdamW", "trl_ds.worker.unused_packages", False),
    ("Muon", "deepspeed.runtime.zero.muon.muon_optimizer", True),
])
def test_deepspeeds_muon_module_is_imported_only_for_a_muon_run(tmp_path, optimizer, muon_class_from,
                                                               inductor_imported):
    (tmp_path / "ds_config.json").write_text(json.dumps({"optimizer": {"type": optimizer, "params": {}}}))
    out = subprocess.run([sys.executable, "-c", IMPORT_MUON, str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1].split() == [muon_class_from, str(inductor_imported)]  # after DeepSpeed's lines
