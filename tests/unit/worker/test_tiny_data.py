"""The built-in datasets have each trainer's shape, and the built-in GRPO reward scores them."""
import json

import pytest

from trl_ds.check.trainer_rules import NEEDED_COLUMNS
from trl_ds.worker.data import NUMBERS, write_tiny_dataset
from trl_ds.worker.rewards import arithmetic_reward


@pytest.mark.parametrize("trainer", list(NEEDED_COLUMNS))
def test_tiny_dataset_has_the_trainers_columns(tmp_path, trainer):
    path = write_tiny_dataset(str(tmp_path), trainer)
    records = [json.loads(line) for line in open(path)]
    assert len(records) == 512
    assert any(set(option) <= set(records[0]) for option in NEEDED_COLUMNS[trainer])


def test_preference_pairs_choose_the_right_sum(tmp_path):
    records = [json.loads(line) for line in open(write_tiny_dataset(str(tmp_path), "dpo"))]
    for r in records:
        words = r["prompt"].split()
        right = NUMBERS[NUMBERS.index(words[4]) + NUMBERS.index(words[6])]
        assert r["chosen"] == f" {right}" and r["rejected"] != r["chosen"] and r["rejected"].strip() in NUMBERS


def test_arithmetic_reward():
    completions = ["seven [EOS]", "nine", "the sum", "", [{"role": "assistant", "content": "seven"}]]
    assert arithmetic_reward(completions, answer=["seven"] * 5) == [1.0, 0.25, 0.0, 0.0, 1.0]


def test_tiny_model_folder_names_its_architecture(tmp_path, compose_cfg):
    """TRL builds DPO's reference model from the policy's folder, by the architecture its config.json records."""
    from trl_ds.worker.models import save_tiny_model

    save_tiny_model(compose_cfg().model, str(tmp_path / "model"), seed=0)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
