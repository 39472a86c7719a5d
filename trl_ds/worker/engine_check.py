"""What the DeepSpeed engine a rank built says, against what the run dir says (ds_config.json, config.yaml).

A script can build its engine from another DeepSpeed file, from none, or with another optimizer: each rank records
the differences in the settings the plan rests on; the launcher prints them at the end, with both values and why."""
import os
from typing import Dict, List, Optional

from trl_ds.config.values import world_size
from trl_ds.rundir.layout import DS_CONFIG, memory_file, read_json, write_json
from trl_ds.worker.measure import measure_rank

# setting: how the launcher's line names it ("the engine ran ZeRO stage 3; the run dir says 2")
NAMES = {"zero_stage": "ZeRO stage", "offload_optimizer": "optimizer offload", "offload_param": "parameter offload",
         "micro_batch": "micro-batch", "accumulation": "gradient accumulation", "gradient_clipping":
         "gradient clipping", "precision": "precision", "world_size": "world size", "optimizer": "optimizer"}
IN_CODE = "built in code"


def engine_settings(engine) -> Dict:
    """What ran, from the engine's own getters (not the file it may have been given)."""
    zero = engine._config.zero_config
    client = engine.client_optimizer
    return {"zero_stage": engine.zero_optimization_stage(), "offload_optimizer": _device(zero.offload_optimizer),
            "offload_param": _device(zero.offload_param), "micro_batch": engine.train_micro_batch_size_per_gpu(),
            "accumulation": engine.gradient_accumulation_steps(),
            "gradient_clipping": float(engine.gradient_clipping() or 0.0),
            "precision": "bf16" if engine.bfloat16_enabled() else "fp16" if engine.fp16_enabled() else "fp32",
            "world_size": engine.world_size,
            "optimizer": f"{type(client).__name__} ({IN_CODE})" if client is not None
            else str(engine._config.optimizer_name or "none").lower()}


def run_dir_settings(ds_config: Dict, world: int) -> Dict:
    """The same settings as ds_config.json states them ("auto" or absent: not compared)."""
    zero = ds_config.get("zero_optimization", {})
    optimizer = ds_config.get("optimizer")
    precision = "bf16" if ds_config.get("bf16", {}).get("enabled") is True else \
        "fp16" if ds_config.get("fp16", {}).get("enabled") is True else "fp32"
    return {"zero_stage": zero.get("stage", 0), "offload_optimizer": _device(zero.get("offload_optimizer")),
            "offload_param": _device(zero.get("offload_param")),
            "micro_batch": ds_config.get("train_micro_batch_size_per_gpu"),
            "accumulation": ds_config.get("gradient_accumulation_steps"),
            "gradient_clipping": _number(ds_config.get("gradient_clipping", 0.0)), "precision": precision,
            "world_size": world,
            "optimizer": str(optimizer["type"]).lower() if optimizer else f"the script's ({IN_CODE})"}


def differences(ran: Dict, said: Dict, cause: Optional[str]) -> List[Dict]:
    """[{setting, name, engine, run_dir, cause}] where both are known and differ."""
    found = []
    for key, name in NAMES.items():
        mine, theirs = ran.get(key), said.get(key)
        if mine is None or theirs is None or theirs == "auto":
            continue
        if key == "optimizer" and IN_CODE in str(mine) and IN_CODE in str(theirs):
            continue
        if mine != theirs:
            found.append({"setting": key, "name": name, "engine": mine, "run_dir": theirs, "cause": cause})
    return found


def compare_engine(trainer, cfg, run_dir: str) -> List[Dict]:
    """The differences of this rank's engine (a trainer with no DeepSpeed engine: none to compare). An elastic launch
    (launcher.min_nodes) that started fewer ranks accumulates more by design (worker/elastic.py): its world size and
    accumulation are not compared."""
    engine = getattr(trainer, "deepspeed", None) or getattr(trainer, "model_wrapped", None)
    if engine is None or not hasattr(engine, "zero_optimization_stage"):
        return []
    ran = engine_settings(engine)
    said = run_dir_settings(read_json(os.path.join(run_dir, DS_CONFIG)), world_size(cfg))
    if cfg.launcher.min_nodes is not None and ran["world_size"] != said["world_size"]:
        said["world_size"] = said["accumulation"] = None
    return differences(ran, said, cause_of(trainer.args.deepspeed, run_dir))


def cause_of(deepspeed, run_dir: str) -> Optional[str]:
    """Why the engine is not the run dir's, from the DeepSpeed config the script's TrainingArguments named."""
    if deepspeed is None:
        return ("the script's TrainingArguments name no DeepSpeed config (deepspeed=None): accelerate built the engine "
                "from its defaults; give the script the run dir's ds_config.json ($TRL_DS_RUN_DIR/ds_config.json) or "
                "state script_convention= (docs/scripts.md)")
    if isinstance(deepspeed, dict):
        return "the script's TrainingArguments(deepspeed=<a dict of its own>)"
    path = os.path.abspath(str(deepspeed))
    if os.path.dirname(path) != os.path.abspath(run_dir):
        return f"the script's --deepspeed {deepspeed}"
    return None


def _device(block) -> str:
    if block is None:
        return "none"
    device = block.get("device") if isinstance(block, dict) else getattr(block, "device", None)
    return str(getattr(device, "value", device) or "none")


def _number(val):
    return float(val) if isinstance(val, (int, float)) else val


def write_rank_memory(trainer, cfg, run_dir: str, rank: int) -> List[Dict]:
    """memory/rank_K.json (worker/measure.py) with this rank's engine differences; returns them for the summary."""
    found = compare_engine(trainer, cfg, run_dir)
    write_json(os.path.join(run_dir, memory_file(rank)), {**measure_rank(trainer, rank), "engine_differences": found})
    return found
