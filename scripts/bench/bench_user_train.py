"""A user's own train.py, as scripts/bench/bench.py --vs-accelerate runs it through trl_ds and through
`accelerate launch`: HfArgumentParser, TRL's SFTTrainer, and a callback that stamps the training steps (it writes only
step_stamps.json, into its output_dir).

    python -m trl_ds script=scripts/bench/bench_user_train.py 'script_args=[--model,M,--data_file,D]'
    accelerate launch --config_file trl/accelerate_configs/zero2.yaml --num_processes 2 --mixed_precision no \
        scripts/bench/bench_user_train.py --model M --data_file D --output_dir OUT --max_steps 10 ...
"""
import json
import os
import time
from dataclasses import dataclass

from datasets import load_dataset
from transformers import HfArgumentParser, TrainerCallback
from trl import SFTConfig, SFTTrainer


@dataclass
class Paths:
    model: str
    data_file: str


class StepStamps(TrainerCallback):
    """Wall-clock seconds when the first step begins and when each step ends; the first rank writes them."""

    def __init__(self):
        self.first_begin, self.ends = None, []

    def on_step_begin(self, args, state, control, **kwargs):
        if self.first_begin is None:
            self.first_begin = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.time())

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            samples = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
            with open(os.path.join(args.output_dir, "step_stamps.json"), "w") as f:
                json.dump({"first_step_begin": self.first_begin, "step_ends": self.ends,
                           "world_size": args.world_size, "samples_per_step": samples}, f)


paths, args = HfArgumentParser((Paths, SFTConfig)).parse_args_into_dataclasses()
data = load_dataset("json", data_files=paths.data_file, split="train")
trainer = SFTTrainer(model=paths.model, args=args, train_dataset=data, callbacks=[StepStamps()])
trainer.train()
