"""The tokens a run trained on, counted from its data file, apart from trl_ds and TRL: the word-level tokenizer gives
one id per word (tests/unit/worker/test_tokenizer_families.py) and TRL's SFT appends EOS; transformers' seeded sampler
draws the rows in the order torch.randperm(rows, seed) gives (accelerate's SeedableRandomSampler, epoch 0), one
global batch after another, whatever the ranks' shape."""
import json


def expected_num_tokens(run_dir, global_batch: int, steps: int, seed: int = 42) -> dict:
    """{step: tokens trained up to and including that step} for the run dir's built-in train data."""
    import torch

    with open(run_dir / "data" / "train.jsonl") as f:
        lengths = [len(json.loads(line)["text"].split()) + 1 for line in f]
    order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(seed)).tolist()
    counts, total = {}, 0
    for step in range(1, steps + 1):
        total += sum(lengths[i] for i in order[(step - 1) * global_batch:step * global_batch])
        counts[step] = total
    return counts


def logged_num_tokens(run_dir) -> dict:
    """{step: num_tokens} of metrics.jsonl's training rows (a superseded row is replaced by the one after it)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["num_tokens"] for r in rows if "loss" in r and not r.get("superseded")}
