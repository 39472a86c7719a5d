"""A rank keeps out the packages and modules its run never uses, before transformers and DeepSpeed are imported.

- peft imports bitsandbytes whenever it is installed (with a warning about a missing `kernels` package), although
  only a quantized base (peft=qlora, or peft.load_in_8bit) uses it.
- DeepSpeed's engine imports its Muon optimizer module at start only to ask whether the optimizer is one
  (zero/utils.py, stage_1_and_2.py, stage3.py, bf16_optimizer.py); importing it wraps Muon's kernels in
  torch.compile, whose first call imports TorchInductor. A run whose ds_config.json names another optimizer gets a
  stand-in module whose class no optimizer is an instance of.

Both bring in TorchInductor, so either alone saves little; together a rank's start falls from 7.1 to 5.7 s of CPU
here (scripts/bench_rank_start.py, which times nothing kept out, bitsandbytes alone, and both).
"""
import json
import os
import sys
import types

import yaml

from trl_ds.rundir.layout import DS_CONFIG, RESOLVED_CONFIG

MUON_MODULE = "deepspeed.runtime.zero.muon.muon_optimizer"


def keep_out_unused_packages(run_dir: str) -> None:
    """The worker's rank: both keep-outs (a user's script may use bitsandbytes itself: it gets only skip_muon)."""
    with open(os.path.join(run_dir, RESOLVED_CONFIG)) as f:
        peft = (yaml.safe_load(f) or {}).get("peft") or {}
    if not (peft.get("load_in_4bit") or peft.get("load_in_8bit")):
        # None in sys.modules: importlib.util.find_spec answers None and `import bitsandbytes` raises ImportError,
        # which is how peft and transformers find it absent
        sys.modules.setdefault("bitsandbytes", None)
    skip_muon(run_dir)


def skip_muon(run_dir: str) -> None:
    with open(os.path.join(run_dir, DS_CONFIG)) as f:
        optimizer = str((json.load(f).get("optimizer") or {}).get("type", ""))
    if "muon" not in optimizer.lower():
        sys.modules.setdefault(MUON_MODULE, _muon_stand_in())


class _NotMuon:
    """Nothing is an instance of it; built directly, it says why it is not DeepSpeed's MuonWithAuxAdam."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"trl_ds: {MUON_MODULE} is kept out of this rank because ds_config.json's optimizer is "
                           "not Muon; set deepspeed's optimizer type to Muon to use it")


def _muon_stand_in() -> types.ModuleType:
    module = types.ModuleType(MUON_MODULE, "trl_ds's stand-in: this run's optimizer is not Muon")
    module.MuonWithAuxAdam = _NotMuon
    return module
