"""The usual way, written by hand: TRL's SFTTrainer with a DeepSpeed JSON, launched with torchrun.

    torchrun --standalone --nproc_per_node 2 scripts/bench/baseline_train.py --deepspeed ds_config.json \
        --model RUN_DIR/model --dataset RUN_DIR/data --micro 2 --accumulation 1 --steps 10

It is the benchmark's baseline (scripts/bench/bench.py): the same training as trl_ds's default run, with no trl_ds code,
ending with the model saved as trl_ds's run does (and TRL's scripts/sft.py), including the CPU workaround a user
must find (Accelerate otherwise gives each CPU rank world size 1).
"""
import argparse
import json
import os
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--deepspeed", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--output", default="/tmp/baseline_train")
    p.add_argument("--micro", type=int, default=2)
    p.add_argument("--accumulation", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    return p.parse_args()


def main():
    args = parse_args()
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    import torch
    from accelerate import PartialState
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import SFTConfig, SFTTrainer

    state = PartialState(backend="nccl" if torch.cuda.is_available() else "gloo")
    with open(args.deepspeed) as f:
        ds_config = json.load(f)
    config = SFTConfig(output_dir=args.output, deepspeed=ds_config, per_device_train_batch_size=args.micro,
                       gradient_accumulation_steps=args.accumulation, max_steps=args.steps, learning_rate=args.lr,
                       lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
                       logging_steps=1, max_length=args.max_length, seed=args.seed, bf16=False, fp16=False,
                       gradient_checkpointing=False, save_strategy="no", report_to="none",
                       accelerator_config={"use_configured_state": True})
    set_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    dataset = load_dataset(args.dataset, split="train")
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
    started = time.time()
    metrics = trainer.train().metrics
    trainer.save_model(args.output)  # as TRL's own scripts/sft.py ends, and as trl_ds saves final_model/
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    if state.is_main_process:
        print("BASELINE " + json.dumps({"final_loss": losses[-1], "train_seconds": time.time() - started,
                                        "samples_per_second": metrics["train_samples_per_second"]}), flush=True)


if __name__ == "__main__":
    main()
