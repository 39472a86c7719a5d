"""The train.py a user writes (HfArgumentParser, TRL's SFTTrainer, a callback of their own), written once per session
and shared by every test that runs a user's own script (test_user_script, test_user_script_hosts, test_slurm)."""
TRAIN_PY = '''"""A user's own script: HfArgumentParser, TRL's SFTTrainer, a callback of their own."""
import os
from dataclasses import dataclass

from datasets import load_dataset
from transformers import HfArgumentParser, TrainerCallback
from trl import SFTConfig, SFTTrainer


@dataclass
class Paths:
    data_file: str = "data/train.jsonl"  # inside the run dir
    model: str = "model"  # a folder: inside the run dir, or absolute


class CountSteps(TrainerCallback):
    def __init__(self):
        self.steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            with open(os.path.join(args.output_dir, "my_steps.txt"), "w") as f:
                f.write(str(self.steps))


paths, args = HfArgumentParser((Paths, SFTConfig)).parse_args_into_dataclasses()
run_dir = os.environ["TRL_DS_RUN_DIR"]
data = load_dataset("json", data_files=os.path.join(run_dir, paths.data_file), split="train")
trainer = SFTTrainer(model=os.path.join(run_dir, paths.model), args=args, train_dataset=data, callbacks=[CountSteps()])
trainer.train()
'''


def user_train_py(tmp_path_factory):
    """The script's path; my_steps.txt in its output_dir counts the steps its last launch trained."""
    path = tmp_path_factory.getbasetemp() / "user_script" / "train.py"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(TRAIN_PY)
    return path
