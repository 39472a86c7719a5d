"""deepspeed.from_file=ds_config.json: start from a DeepSpeed JSON as users keep them (full of "auto").

Every key is mapped onto trl_ds's keys, and "auto" is resolved as transformers' HfTrainerDeepSpeedConfig does: the
batch keys, clipping, optimizer and fp16/bf16 from the trainer's arguments; reduce_bucket_size hidden², at stage 3
stage3_prefetch_bucket_size int(0.9 · hidden²) and stage3_param_persistence_threshold 10 · hidden. Other keys pass
through by DeepSpeed's own name (docs/deepspeed-keys.md).
"""
import json
from typing import Any, Dict, List, Sequence, Tuple

from omegaconf import open_dict

from trl_ds.check.deepspeed_json_blocks import BLOCKS, auto_cast
from trl_ds.check.deepspeed_keys import DERIVED_TOP
from trl_ds.check.deepspeed_verdict import top_level_reads
from trl_ds.check.imported import Mapping, apply, read_mapping, show
from trl_ds.config.deepspeed_names import deepspeed_version
from trl_ds.config.schema import AioConfig, ZeroConfig
from trl_ds.config.values import data_parallel_world
from trl_ds.plan.params import architecture

AUTO = "auto"
SAME = object()  # a mapping that keeps the file's value
BATCH = {"train_micro_batch_size_per_gpu": "trainer.per_device_train_batch_size",
         "gradient_accumulation_steps": "trainer.gradient_accumulation_steps",
         "train_batch_size": "batch.global_size", "gradient_clipping": "trainer.max_grad_norm"}
OPTIMIZER = {"lr": "trainer.learning_rate", "eps": "trainer.adam_epsilon", "weight_decay": "trainer.weight_decay"}
LOSS_SCALING = ("initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale")
# DeepSpeed's older names it still reads (runtime/zero/config.py aliases and deprecated fields).
ALIASES = {"prefetch_bucket_size": "stage3_prefetch_bucket_size",
           "param_persistence_threshold": "stage3_param_persistence_threshold",
           "max_live_parameters": "stage3_max_live_parameters", "max_reuse_distance": "stage3_max_reuse_distance",
           "gather_16bit_weights_on_model_save": "stage3_gather_16bit_weights_on_model_save",
           "stage3_gather_fp16_weights_on_model_save": "stage3_gather_16bit_weights_on_model_save"}
STAGE3_ONLY = {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
               "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save", "sub_group_size"}
STAGE12_ONLY = {"allgather_bucket_size", "round_robin_gradients"}
OWNED_ZERO = {f for f in ZeroConfig.__dataclass_fields__} - {"stage", "auto", "zeropp", "zenflow"}
OFFLOAD_OWN = {"pin_memory": "offload.pin_memory", "nvme_path": "offload.nvme_path", "ratio": "offload.ratio",
               "buffer_count": "offload.buffer_count", "buffer_size": "offload.buffer_size",
               "max_in_cpu": "offload.max_in_cpu"}


def number(x: Any) -> Any:
    """1e9 written in JSON is a float; DeepSpeed's int fields take it as the integer it is."""
    return int(x) if isinstance(x, float) and x.is_integer() and abs(x) >= 1 else x


class Importer:
    """Collects the mappings, notes and problems of one file; hidden is the model's hidden size for "auto"."""

    def __init__(self, hidden, final_model: bool = True):
        self._hidden, self.mappings, self.notes, self.problems = hidden, [], [], []
        self.final_model = final_model  # save_final_model: what an "auto" gather on save becomes

    @property
    def hidden(self) -> int:
        return self._hidden()  # read only when a bucket key is auto: it may read the model's config.json

    def map(self, source: str, given: Any, key: str, value: Any = SAME) -> None:
        self.mappings.append(Mapping(source, given, key, number(given) if value is SAME else value))

    def note(self, source: str, given: Any, why: str) -> None:
        self.notes.append(f"{source}: {show(given)}: {why}")

    def refuse(self, source: str, given: Any, why: str) -> None:
        self.problems.append(f"{source}: {show(given)}: {why}")


def ds_settings(ds: Dict[str, Any], hidden, final_model: bool = True) -> Tuple[List[Mapping], List[str], List[str]]:
    imp = Importer(hidden, final_model)
    for key, given in ds.items():
        if key in BATCH:
            _batch_key(imp, key, given)
        elif key in ("fp16", "bf16", "bfloat16"):
            _precision(imp, key, given)
        elif key == "optimizer":
            _optimizer(imp, given)
        elif key == "scheduler":
            _scheduler(imp, given)
        elif key == "zero_optimization":
            _zero(imp, given)
        elif key == "aio":
            for name, v in given.items():
                (imp.map(f"aio.{name}", v, f"offload.aio.{name}") if name in AioConfig.__dataclass_fields__
                 else imp.refuse(f"aio.{name}", v, "DeepSpeed's aio block has no such key"))
        elif key in BLOCKS and isinstance(given, dict):
            BLOCKS[key](imp, given)
        elif key.startswith("_"):
            imp.note(key, given, "a comment (DeepSpeed reads no key starting with _); not written")
        elif key in DERIVED_TOP:
            imp.refuse(key, given, f"trl_ds writes {key} itself: use {DERIVED_TOP[key]}")
        elif given == AUTO:
            imp.refuse(key, given, "transformers fills auto only in the batch, clipping, optimizer, scheduler, "
                                   "fp16/bf16 and ZeRO bucket keys; give a value")
        elif key not in top_level_reads():  # on the command line the same name is refused (a typo there)
            imp.note(key, given, f"DeepSpeed {deepspeed_version()} never reads {key} and ignores it; not written")
        else:
            imp.map(key, given, f"deepspeed.{key}")
    on = [k for k in ("fp16", "bf16", "bfloat16") if isinstance(ds.get(k), dict) and ds[k].get("enabled") is True]
    if "fp16" in on and len(on) > 1:  # DeepSpeed asserts it too (runtime/config.py), after the ranks start
        imp.refuse(f"{on[0]}.enabled and {on[1]}.enabled", True, "both true; DeepSpeed trains in one of them. "
                                                                 "Keep one enabled")
    return imp.mappings, imp.notes, imp.problems


def _batch_key(imp: Importer, key: str, given: Any) -> None:
    if given == AUTO and key == "gradient_clipping":
        imp.note(key, given, "trainer.max_grad_norm, as transformers fills it")
    elif given == AUTO:
        imp.note(key, given, "derived by trl_ds as transformers fills it (global = micro × accumulation × world)")
    else:
        imp.map(key, given, BATCH[key])


def derived_micro(ds: Dict[str, Any], world: int) -> Tuple[List[Mapping], List[str]]:
    """A file that gives train_batch_size without train_micro_batch_size_per_gpu: the micro-batch derived as DeepSpeed
    does, train_batch_size / (gradient_accumulation_steps or 1 × world), or why it cannot be."""
    tbs, acc = number(ds.get("train_batch_size")), number(ds.get("gradient_accumulation_steps", 1))
    if "train_micro_batch_size_per_gpu" in ds or not isinstance(tbs, int) or not isinstance(acc, int) or acc < 1:
        return [], []
    if tbs % (acc * world):
        return [], [f"train_batch_size: {tbs} with gradient_accumulation_steps {acc}: DeepSpeed derives the "
                    f"micro-batch as {tbs} / ({acc} × world {world}), which is not whole. Change the cluster "
                    f"(cluster.nodes, cluster.gpus_per_node) or the file's batch numbers."]
    micro = tbs // (acc * world)
    return [Mapping(f"(derived by DeepSpeed) train_batch_size {tbs} / (gradient_accumulation_steps {acc} × world "
                    f"{world})", micro, "trainer.per_device_train_batch_size", micro)], []


def batch_problem(ds: Dict[str, Any], world: int) -> List[str]:
    """All three batch numbers fixed: global = micro × accumulation × the cluster's world, or refused."""
    tbs, micro, acc = (number(ds.get(k)) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                                   "gradient_accumulation_steps"))
    if not all(isinstance(v, int) for v in (tbs, micro, acc)) or tbs == micro * acc * world:
        return []
    return [f"train_batch_size: {tbs} cannot be made by this cluster: train_micro_batch_size_per_gpu {micro} × "
            f"gradient_accumulation_steps {acc} × world {world} = {micro * acc * world}. Change the cluster "
            f"(cluster.nodes, cluster.gpus_per_node) or the file's batch numbers, or write \"auto\" for one of them."]


def _precision(imp: Importer, key: str, block: Any) -> None:
    if not isinstance(block, dict):
        return imp.refuse(key, block, "must be a block such as {\"enabled\": true}")
    enabled = block.get("enabled", False)
    name = "bf16" if key in ("bf16", "bfloat16") else "fp16"
    if enabled is True:
        imp.map(f"{key}.enabled", enabled, "precision.dtype", name)
    elif enabled == AUTO:
        imp.note(f"{key}.enabled", enabled, "from precision, as transformers fills it from its bf16/fp16 arguments")
    for option, v in block.items():
        where = f"{key}.{option}"
        if option == "enabled":
            continue
        if option == "auto_cast":
            auto_cast(imp, key, v)
        elif option in LOSS_SCALING:
            imp.map(where, v, f"precision.{option}")
        elif option == "loss_scale" and v != 0:
            imp.refuse(where, v, "trl_ds scales fp16 losses dynamically (loss_scale 0); drop it for dynamic scaling")
        elif option in ("bf16_master_weights_and_grads", "bf16_optimizer_states"):
            imp.map(where, v, f"precision.{option}")
        elif option != "loss_scale":
            imp.refuse(where, v, f"trl_ds writes the {name} block from precision.*; it has no key {option}")


def _optimizer(imp: Importer, block: Dict[str, Any]) -> None:
    kind, params = block.get("type", ""), block.get("params", {})
    if kind not in ("AdamW", "Adam") or (kind == "Adam" and params.get("adam_w_mode") is False):
        return imp.refuse("optimizer.type", kind, "trl_ds trains with DeepSpeed's AdamW (the memory plan counts "
                                                  "its two moments); use type AdamW, or drop the optimizer block")
    for name, v in params.items():
        where = f"optimizer.params.{name}"
        if v == AUTO:
            imp.note(where, v, "from trainer.* as transformers fills it")
        elif name == "betas":
            imp.map(where, v, "trainer.adam_beta1", v[0])
            imp.map(where, v, "trainer.adam_beta2", v[1])
        elif name in OPTIMIZER:
            imp.map(where, v, OPTIMIZER[name])
        elif name in ("torch_adam", "adam_w_mode", "fused"):
            imp.note(where, v, "trl_ds picks the implementation (torch's AdamW on CPU ranks, DeepSpeed's otherwise)")
        else:
            imp.refuse(where, v, "trl_ds's AdamW block takes lr, betas, eps and weight_decay only")


def _scheduler(imp: Importer, block: Dict[str, Any]) -> None:
    """No scheduler block: transformers builds lr_scheduler_type's (same curve for linear warmup)."""
    kind, params = block.get("type", ""), block.get("params", {})
    schedule = {"WarmupLR": "constant_with_warmup", "WarmupDecayLR": "linear", "WarmupCosineLR": "cosine"}
    if kind not in schedule:
        return imp.refuse("scheduler.type", kind, "trl_ds schedules with transformers' lr_scheduler_type: use "
                                                  "WarmupLR, WarmupDecayLR or WarmupCosineLR, or drop the block")
    imp.map("scheduler.type", kind, "trainer.lr_scheduler_type", schedule[kind])
    if params.get("warmup_type", "log") == "log" and params.get("warmup_num_steps", AUTO) not in (AUTO, 0):
        imp.refuse("scheduler.params.warmup_type", params.get("warmup_type", "log"),
                   "DeepSpeed warms up logarithmically unless warmup_type is linear; transformers' schedules warm "
                   "up linearly. Write \"warmup_type\": \"linear\"")
    for name, v in params.items():
        where = f"scheduler.params.{name}"
        if v == AUTO or name in ("warmup_type", "total_num_steps"):
            imp.note(where, v, "from trainer.* (the trainer's steps and warmup)") if v == AUTO else None
        elif name == "warmup_num_steps":
            imp.map(where, v, "trainer.warmup_steps")
        elif name == "warmup_max_lr":
            imp.map(where, v, "trainer.learning_rate")
        elif name == "warmup_min_lr" and v != 0:
            imp.refuse(where, v, "transformers' schedules warm up from 0; write 0 or auto")
        elif name != "warmup_min_lr":
            imp.refuse(where, v, f"transformers' {schedule[kind]} schedule has no such parameter")


def _zero(imp: Importer, block: Dict[str, Any]) -> None:
    stage = number(block.get("stage", 0))
    imp.map("zero_optimization.stage", block.get("stage", 0), "zero.stage", stage)
    if "overlap_comm" not in block and stage > 0:  # DeepSpeed's default differs from trl_ds's preset
        imp.map("zero_optimization.overlap_comm", "(absent)", "zero.overlap_comm", stage == 3)
    for name, given in block.items():
        where = f"zero_optimization.{name}"
        if name == "stage":
            continue
        if name in ("offload_optimizer", "offload_param"):
            _offload(imp, name, given, stage)
        elif name in ("cpu_offload", "cpu_offload_param"):
            part = "optimizer" if name == "cpu_offload" else "param"
            imp.map(where, given, f"offload.{part}", "cpu" if given else "none")
        elif name == "cpu_offload_use_pin_memory":
            imp.map(where, given, "offload.pin_memory")
        else:
            _zero_key(imp, where, ALIASES.get(name, name), given, stage)


def _zero_key(imp: Importer, where: str, name: str, given: Any, stage: int) -> None:
    if stage == 0:  # trl_ds writes no ZeRO key at stage 0 but those given by DeepSpeed's name
        return imp.note(where, given, "DeepSpeed ignores it at stage 0; not written") if name in OWNED_ZERO \
            else imp.map(where, given, f"zero.{name}")
    if (name in STAGE3_ONLY and stage != 3) or (name in STAGE12_ONLY and stage == 3):
        return imp.note(where, given, f"DeepSpeed ignores it at stage {stage}; not written")
    if given == AUTO and name == "stage3_gather_16bit_weights_on_model_save":
        imp.note(where, given, "accelerate's DeepSpeedPlugin fills it from zero3_save_16bit_model (false unless "
                               "set); trl_ds gathers the 16-bit model when save_final_model=true (its final_model) "
                               "and not otherwise")
        return imp.map(where, given, f"zero.{name}", imp.final_model)
    if given == AUTO:
        auto = {"reduce_bucket_size": imp.hidden ** 2, "stage3_prefetch_bucket_size": int(0.9 * imp.hidden ** 2),
                "stage3_param_persistence_threshold": 10 * imp.hidden}
        if name not in auto:
            return imp.refuse(where, given, "transformers fills auto only in reduce_bucket_size and the stage-3 "
                                            "prefetch and persistence keys; give a value")
        return imp.map(where, given, f"zero.{name}", auto[name])
    imp.map(where, given, f"zero.{name}")  # trl_ds's own key, or DeepSpeed's by name (checked before launch)


def _offload(imp: Importer, name: str, block: Dict[str, Any], stage: int) -> None:
    part = "optimizer" if name == "offload_optimizer" else "param"
    device = block.get("device", "none")
    if part == "param" and stage != 3 and device != "none":
        return imp.note(f"zero_optimization.{name}", block, f"DeepSpeed ignores offload_param at stage {stage}; "
                                                            f"not written")
    imp.map(f"zero_optimization.{name}.device", device, f"offload.{part}")
    for key, v in block.items():
        if key == "nvme_path" and part == "optimizer":  # its own folder: the parameters' may be another
            imp.map(f"zero_optimization.{name}.{key}", v, "offload.optimizer_nvme_path")
        elif key != "device":
            imp.map(f"zero_optimization.{name}.{key}", v, OFFLOAD_OWN.get(key, f"offload.{key}"))


def apply_deepspeed_json(cfg, command_line: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Set the JSON's values into cfg where the command line did not: (the printed mapping lines, problems)."""
    path = (cfg.deepspeed or {}).get("from_file")
    if not path:
        return [], []
    with open_dict(cfg):
        cfg.deepspeed.pop("from_file")  # the file's keys replace it: ds_config.json is written from them
    where = f"deepspeed.from_file={path}"
    ds, problems = read_mapping(path, where, "a DeepSpeed JSON file", _load)
    mappings, notes, refused = ds_settings(ds, lambda: architecture(cfg.model).hidden_size, cfg.save_final_model)
    derived, not_whole = derived_micro(ds, data_parallel_world(cfg))
    lines, not_set = apply(cfg, where, mappings + derived, notes, command_line)
    refused += not_whole + batch_problem(ds, data_parallel_world(cfg))
    return lines, problems + [f"{where}: {p}" for p in refused] + not_set


def _load(f) -> Any:
    return json.load(f)  # json.JSONDecodeError is a ValueError
