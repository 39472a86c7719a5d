"""Per-trainer construction on each rank: TRL's own parser (the one behind `trl <cmd>`) reads trainer.yaml, then the
model, data and trainer. The trainer arguments, holding the DeepSpeed config, exist before any model is loaded, so
under ZeRO-3 transformers loads it partitioned.
"""
import importlib
import os
from typing import List

import yaml

from trl_ds.config.values import sp_size, value, world_size
from trl_ds.rundir.layout import DS_CONFIG, TRAINER_YAML, read_json
from trl_ds.rundir.trainer_config import RUN_DIR_PATHS, eval_dataset_path, in_run_dir, is_run_dir_path
from trl_ds.worker.elastic import fit_to_world
from trl_ds.worker.moe_leaf import mark_moe_leaf_modules

TRAINER_CLASSES = {"sft": "SFTTrainer", "dpo": "DPOTrainer", "grpo": "GRPOTrainer", "reward": "RewardTrainer",
                   "kto": "KTOTrainer", "rloo": "RLOOTrainer"}
GENERATING = ("grpo", "rloo")  # trainers that take reward functions and generate their completions


def build_trainer(cfg, run_dir: str, callbacks: List, load_universal: bool = False):
    import trl
    from transformers import AutoTokenizer, set_seed

    from trl_ds.worker.data import load_split

    name = value(cfg.trainer.name)
    script_args, training_args, model_args = parse_trainer_yaml(cfg, run_dir, load_universal)
    set_seed(cfg.seed)  # before the model, so new heads (reward's score) start the same on every run
    model = load_model(name, model_args, training_args)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
    kwargs = dict(model=model, args=training_args, processing_class=tokenizer, callbacks=callbacks,
                  peft_config=trl.get_peft_config(model_args),
                  train_dataset=load_split(script_args.dataset_name, script_args.dataset_train_split))
    if training_args.eval_strategy != "no":
        kwargs["eval_dataset"] = load_split(eval_dataset_path(cfg, run_dir), script_args.dataset_test_split)
    if name in GENERATING:
        kwargs["reward_funcs"] = [import_function(path) for path in script_args.reward_funcs]
    return getattr(trl, TRAINER_CLASSES[name])(**kwargs)


def parse_trainer_yaml(cfg, run_dir: str, load_universal: bool = False):
    """(script args, trainer config, model config) as `trl <cmd> --config trainer.yaml` builds them, plus what only a
    rank of this run knows: the DeepSpeed dict, the configured accelerate state, with Ulysses its groups, and the
    accumulation for the ranks that joined. trainer.yaml's paths are resolved against the run dir."""
    with open(os.path.join(run_dir, TRAINER_YAML)) as f:
        args = yaml.safe_load(f)
    args.pop("accelerate_config")  # read by `trl <cmd>` to launch; this rank is already launched
    for key in RUN_DIR_PATHS:
        if key in args and is_run_dir_path(args[key]):
            args[key] = os.path.join(run_dir, args[key])
    args["deepspeed"] = in_run_dir(read_json(os.path.join(run_dir, DS_CONFIG)), run_dir)
    world = int(os.environ.get("WORLD_SIZE") or world_size(cfg))  # fewer than planned in an elastic launch
    fitted = fit_to_world(args, args["deepspeed"], world_size(cfg), world)
    if fitted:
        print(fitted, flush=True)
    if load_universal:  # a checkpoint of another cluster shape, converted (trl_ds/rundir/universal.py)
        args["deepspeed"]["checkpoint"] = {**args["deepspeed"].get("checkpoint", {}), "load_universal": True}
    args["accelerator_config"] = {"use_configured_state": True}  # see train.init_distributed
    if sp_size(cfg) > 1:
        from trl_ds.rundir.interop import parallelism_config

        args["parallelism_config"] = parallelism_config(cfg)
    parser = importlib.import_module(f"trl.scripts.{value(cfg.trainer.name)}").make_parser()
    script_args, training_args, model_args, _datasets = parser.parse_dict(args)
    return script_args, training_args, model_args


def model_kwargs(model_args, training_args) -> dict:
    """from_pretrained's arguments from TRL's ModelConfig: every field trl_ds accepts in trainer.args and does not
    refuse before launch (check/trl_arguments.py APPLIED_BY_WORKER) is applied here, and a quantized base (peft=qlora)
    as `trl <cmd>` builds it. The dtype is the precision's."""
    import torch
    from trl import get_quantization_config

    dtype = torch.bfloat16 if training_args.bf16 else torch.float16 if training_args.fp16 else torch.float32
    kwargs = {"dtype": dtype, "revision": model_args.model_revision}
    if model_args.attn_implementation:
        kwargs["attn_implementation"] = model_args.attn_implementation
    quantization = get_quantization_config(model_args)  # None without load_in_4bit / load_in_8bit
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    return kwargs


def load_model(name: str, model_args, training_args):
    """A causal LM, or for the reward trainer the same weights under a one-score classification head."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    kwargs = model_kwargs(model_args, training_args)
    if name == "reward":
        model = AutoModelForSequenceClassification.from_pretrained(model_args.model_name_or_path, num_labels=1,
                                                                   **kwargs)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, **kwargs)
    mark_moe_leaf_modules(model, training_args.deepspeed)  # before the trainer builds the engine
    return model


def import_function(path: str):
    """pkg.module.fn, as `trl grpo` and `trl rloo` import reward functions (validated before launch)."""
    module_name, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


def count_parameters(model) -> dict:
    """Trainable and total parameters, counted whole under ZeRO-3 (each rank holds a partition)."""
    trainable = total = 0
    for p in model.parameters():
        n = p.ds_numel if hasattr(p, "ds_numel") else p.numel()
        total += n
        trainable += n if p.requires_grad else 0
    return {"trainable_parameters": trainable, "total_parameters": total}
