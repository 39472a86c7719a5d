"""How many optimizer steps a run takes, known before launch: trainer.max_steps, or for trainer.max_steps=-1
trainer.num_train_epochs passes over the training rows, counted as transformers' Trainer counts them: each rank
reads ceil(ceil(rows / micro) / data-parallel world) batches per epoch, and a step takes `accumulation` of them.
"""
import csv
import json
import math
import os
from typing import Optional, Tuple

from trl_ds.config.batch import Batch
from trl_ds.config.data_files import split_files
from trl_ds.config.values import TINY_SIZE, is_local_path, sp_size, value


def training_steps(cfg, batch: Batch) -> dict:
    """plan.json's "training" block: the optimizer steps, and for epochs how they were counted."""
    t = cfg.trainer
    if t.max_steps > 0:
        return {"max_steps": t.max_steps, "optimizer_steps": t.max_steps}
    rows, why_not = train_rows(cfg)
    out = {"max_steps": -1, "num_train_epochs": t.num_train_epochs, "train_rows": rows}
    if rows is None:
        return {**out, "optimizer_steps": None, "not_counted": why_not}
    per_epoch = steps_per_epoch(rows, batch, bool(t.get("dataloader_drop_last", False)))
    return {**out, "steps_per_epoch": per_epoch, "optimizer_steps": math.ceil(t.num_train_epochs * per_epoch)}


def steps_per_epoch(rows: int, batch: Batch, drop_last: bool = False) -> int:
    if drop_last and rows >= batch.global_size:  # the rank cuts the rows to whole global batches (worker/data.py)
        return rows // batch.global_size
    round_ = math.floor if drop_last else math.ceil
    per_rank = round_(round_(rows / batch.micro) / batch.world)
    return max(math.ceil(per_rank / batch.accumulation), 1)


def describe(training: dict) -> str:
    """The printed steps, e.g. '8 optimizer steps (64 rows: 8 per epoch × 1.0 epochs)'."""
    steps = training["optimizer_steps"]
    if "num_train_epochs" not in training:
        return f"{steps} optimizer steps (trainer.max_steps)"
    if steps is None:
        return f"{training['num_train_epochs']} epochs; steps not known before launch ({training['not_counted']})"
    return (f"{steps} optimizer steps ({training['train_rows']} rows: {training['steps_per_epoch']} per epoch × "
            f"{training['num_train_epochs']} epochs)")


def train_rows(cfg) -> Tuple[Optional[int], str]:
    """(rows of the training split, '') or (None, why they cannot be counted here)."""
    t, name = cfg.trainer, cfg.trainer.dataset_name
    if value(t.name) in ("grpo", "rloo"):
        return None, f"trainer={value(t.name)} batches generations, not rows"
    if sp_size(cfg) > 1:
        return None, "sp=ulysses shares rows between ranks"
    if t.args and t.args.get("packing"):
        return None, "packing joins rows; the trainer counts the packed sequences"
    if name == "tiny":
        return TINY_SIZE, ""
    if value(t.name) == "kto":  # KTOTrainer's _prepare_dataset
        return None, "trainer=kto unpairs chosen/rejected rows and drops prompts that fill max_length"
    if not is_local_path(name):
        return None, "a hub dataset is counted by the trainer"
    files = split_files(os.path.expanduser(name), t.dataset_train_split)
    counts = [rows_or_none(f) for f in files]
    if not files or None in counts:
        return None, f"no readable {t.dataset_train_split} file at {name}"
    return sum(counts), ""


def rows_or_none(path: str) -> Optional[int]:
    try:
        return file_rows(path)
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # unreadable here: the loader will say why


def file_rows(path: str) -> Optional[int]:
    """Records in one data file, or None for a format not counted here."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    with open(path, encoding="utf-8-sig") as f:  # datasets drops a leading BOM, json.loads refuses it
        if path.endswith(".jsonl"):
            return sum(1 for line in f if line.strip())
        if path.endswith(".csv"):
            return max(sum(1 for _ in csv.reader(f)) - 1, 0)
        if path.endswith(".json"):
            text = f.read()
            try:
                loaded = json.loads(text)
                return len(loaded) if isinstance(loaded, list) else 1
            except ValueError:  # JSON lines in a .json file
                return sum(1 for line in text.splitlines() if line.strip())
    return None
