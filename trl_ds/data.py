"""The built-in tiny SFT dataset and its word-level vocabulary, and loading of user datasets.

The tiny data is arithmetic in words ("what is three plus four ? seven"), deterministic and learnable, so the loss
falls within a few steps. It needs no download and no torch.
"""
import json
import os
import random
from typing import Dict, List

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
           "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen"]
WORDS = ["question", ":", "what", "is", "plus", "?", "answer", "the", "sum", "of", "and", "."]
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
VOCABULARY = SPECIAL_TOKENS + NUMBERS + WORDS
TINY_SIZE = 512  # examples


def tiny_sft_examples(n: int = TINY_SIZE, seed: int = 0) -> List[Dict[str, str]]:
    """Plain-text SFT examples (TRL's "text" field), two phrasings so lengths vary."""
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        if rng.random() < 0.5:
            text = f"question : what is {NUMBERS[a]} plus {NUMBERS[b]} ? answer : {NUMBERS[a + b]}"
        else:
            text = f"question : what is the sum of {NUMBERS[a]} and {NUMBERS[b]} ? answer : the sum is {NUMBERS[a + b]} ."
        examples.append({"text": text})
    return examples


def write_tiny_dataset(folder: str) -> str:
    """Write train.jsonl into folder, so `datasets.load_dataset(folder)` and TRL's CLI both read it."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "train.jsonl")
    with open(path, "w") as f:
        for example in tiny_sft_examples():
            f.write(json.dumps(example) + "\n")
    return path


def load_train_dataset(name: str, split: str):
    """A local file by its suffix, a local folder, or a hub dataset name."""
    from datasets import load_dataset

    for suffix, builder in ((".jsonl", "json"), (".json", "json"), (".parquet", "parquet"), (".csv", "csv")):
        if name.endswith(suffix):
            return load_dataset(builder, data_files={split: os.path.expanduser(name)}, split=split)
    return load_dataset(os.path.expanduser(name), split=split)
