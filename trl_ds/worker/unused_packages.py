"""A rank keeps out the packages and modules its run never uses, before transformers and DeepSpeed are imported:
bitsandbytes, which peft imports whenever it is installed although only a quantized base uses it; and DeepSpeed's
Muon optimizer module, which the engine imports only to ask whether the optimizer is one, and which wraps its
kernels in torch.compile (TorchInductor). A run whose ds_config.json names another optimizer gets a stand-in module.
Both bring in TorchInductor, so they go together (scripts/bench/bench_rank_start.py times it).
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
