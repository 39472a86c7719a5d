"""Every family's tiny model folder gives the tokens trl_ds's word-level tokenizer really produces.

AutoTokenizer picks a tokenizer class by model_type for some families (qwen2: Qwen2Tokenizer, which re-reads a
word-level tokenizer.json as byte-level BPE); the expected ids come from the `tokenizers` library reading the same
tokenizer.json, and from the data itself (one id per whitespace-separated word)."""
import json

import pytest

from trl_ds.worker.data import VOCABULARY, write_tiny_dataset

FAMILIES = ["llama", "qwen2", "mistral", "gemma2", "phi3"]


@pytest.fixture(scope="module")
def row(tmp_path_factory):
    path = write_tiny_dataset(str(tmp_path_factory.mktemp("data")), "sft")
    with open(path) as f:
        return json.loads(f.readline())["text"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_model_folder_tokenizes_a_row_as_the_built_in_tokenizer(tmp_path, compose_cfg, row, family):
    from tokenizers import Tokenizer
    from transformers import AutoProcessor, AutoTokenizer

    from trl_ds.worker.models import save_tiny_model

    folder = tmp_path / "model"
    save_tiny_model(compose_cfg([f"model.model_type={family}"]).model, str(folder), seed=0)
    assert json.loads((folder / "config.json").read_text())["model_type"] == family
    expected = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(row).ids
    assert expected == [VOCABULARY.index(word) for word in row.split()]
    # as the worker loads it (trl_ds/worker/trainers.py), as TRL's SFTTrainer does without a processing_class,
    # and as a loader that trusts the folder's code does
    loaded = [AutoTokenizer.from_pretrained(str(folder), revision=None),
              AutoProcessor.from_pretrained(str(folder), trust_remote_code=False),
              AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)]
    for tokenizer in loaded:
        assert tokenizer(row, add_special_tokens=True)["input_ids"] == expected, type(tokenizer).__name__
        assert tokenizer.pad_token == "[PAD]" and tokenizer.eos_token == "[EOS]"
