"""The built-in tiny datasets (one shape per trainer) and their word-level vocabulary, and loading of user datasets.
The tiny data is arithmetic in words ("what is three plus four ? seven"): deterministic, learnable, no download.
"""
import json
import os
import random
from typing import Dict, List

from trl_ds.config.data_files import split_files
from trl_ds.config.values import TINY_SIZE

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
           "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen"]
WORDS = ["question", ":", "what", "is", "plus", "?", "answer", "the", "sum", "of", "and", "."]
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
VOCABULARY = SPECIAL_TOKENS + NUMBERS + WORDS
TINY_TEST_SIZE = 64  # examples of the held-out "test" split, drawn with another seed


def tiny_sft_examples(n: int = TINY_SIZE, seed: int = 0) -> List[Dict[str, str]]:
    """Plain-text SFT examples (TRL's "text" field), two phrasings so lengths vary."""
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        if rng.random() < 0.5:
            text = f"question : what is {NUMBERS[a]} plus {NUMBERS[b]} ? answer : {NUMBERS[a + b]}"
        else:
            text = (f"question : what is the sum of {NUMBERS[a]} and {NUMBERS[b]} ? "
                    f"answer : the sum is {NUMBERS[a + b]} .")
        examples.append({"text": text})
    return examples


def tiny_preference_examples(n: int = TINY_SIZE, seed: int = 0) -> List[Dict[str, str]]:
    """DPO / reward pairs: the right sum is chosen, a wrong one rejected (TRL's explicit-prompt format)."""
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        a, b, off = rng.randrange(10), rng.randrange(10), rng.randrange(1, len(NUMBERS))
        wrong = (a + b + off) % len(NUMBERS)
        examples.append({"prompt": _question(a, b), "chosen": f" {NUMBERS[a + b]}", "rejected": f" {NUMBERS[wrong]}"})
    return examples


def tiny_unpaired_examples(n: int = TINY_SIZE, seed: int = 0) -> List[Dict[str, object]]:
    """KTO's unpaired format: desirable (the right sum) or not, alternating, so every micro-batch has both."""
    rng = random.Random(seed)
    examples = []
    for i in range(n):
        a, b, off = rng.randrange(10), rng.randrange(10), rng.randrange(1, len(NUMBERS))
        right = i % 2 == 0
        answer = a + b if right else (a + b + off) % len(NUMBERS)
        examples.append({"prompt": _question(a, b), "completion": f" {NUMBERS[answer]}", "label": right})
    return examples


def tiny_prompt_examples(n: int = TINY_SIZE, seed: int = 0) -> List[Dict[str, str]]:
    """GRPO and RLOO prompts; `answer` reaches the reward function as a keyword."""
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        examples.append({"prompt": _question(a, b), "answer": NUMBERS[a + b]})
    return examples


def _question(a: int, b: int) -> str:
    return f"question : what is {NUMBERS[a]} plus {NUMBERS[b]} ? answer :"


TINY_EXAMPLES = {"sft": tiny_sft_examples, "dpo": tiny_preference_examples, "reward": tiny_preference_examples,
                 "grpo": tiny_prompt_examples, "kto": tiny_unpaired_examples, "rloo": tiny_prompt_examples}


def write_tiny_dataset(folder: str, trainer: str = "sft") -> str:
    """Write train.jsonl and test.jsonl into folder: the splits datasets and TRL's CLI read."""
    os.makedirs(folder, exist_ok=True)
    for split, n, seed in (("test", TINY_TEST_SIZE, 1), ("train", TINY_SIZE, 0)):
        path = os.path.join(folder, f"{split}.jsonl")
        with open(path, "w") as f:
            for example in TINY_EXAMPLES[trainer](n, seed):
                f.write(json.dumps(example) + "\n")
    return path


BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}  # datasets' builder by suffix


def load_split(name: str, split: str):
    """A local file by its suffix, a local folder's split files, else what datasets resolves."""
    import glob

    from datasets import load_dataset

    path = os.path.expanduser(name)
    path = os.path.normpath(path) if os.path.exists(path) else path  # "RUN/./data": datasets' lookup keeps the "."
    files = split_files(path, split)
    if files:  # data_files are glob patterns: a literal path is escaped ([, *, ? are data in a run dir's name)
        builder = BUILDERS[os.path.splitext(files[0])[1]]
        return load_dataset(builder, data_files={split: [glob.escape(f) for f in files]}, split=split)
    return load_dataset(path, split=split)


def whole_global_batches(trainer, world: int):
    """The train split cut to whole global batches when trainer.dataloader_drop_last=true, so every optimizer step of
    an epoch sees one whole global batch whatever the shape (a dataloader drops only its own partial micro-batch, not
    accumulation's partial window). The split's last rows go, after tokenising. GRPO's and RLOO's sampler already
    draws whole generation batches."""
    args, data = trainer.args, trainer.train_dataset
    generating = type(trainer).__name__ in ("GRPOTrainer", "RLOOTrainer")
    if not args.dataloader_drop_last or generating or not hasattr(data, "select"):
        return data
    # Sequence- and tensor-parallel ranks share their samples: only data-parallel ranks multiply the batch.
    shares = (args.hf_deepspeed_config.config or {}).get("sequence_parallel_size", 1) * trainer.get_tp_size()
    global_size = args.per_device_train_batch_size * args.gradient_accumulation_steps * world // shares
    keep = len(data) // global_size * global_size
    if keep in (0, len(data)):  # smaller than one global batch: left to the trainer, which trains no step
        return data
    if args.process_index == 0:
        print(f"trl_ds: trainer.dataloader_drop_last=true: training on the first {keep} of {len(data)} rows "
              f"({keep // global_size} whole global batches of {global_size} per epoch)", flush=True)
    return data.select(range(keep))
