"""LoRA on families whose attention is not Llama's q_proj/k_proj/v_proj/o_proj (#59's Why 6): BLOOM's fused
query_key_value (nn.Linear) and GPT-2's c_attn (transformers' Conv1D). With peft=lora and no targets given, each rank
failed in PEFT ("Target modules {'q_proj', ...} not found in the base model"); now the targets are PEFT's own default
for the family and the run trains them. One real 2-rank run each, from a save_pretrained folder."""
import math
import shutil
from pathlib import Path

import pytest
from conftest import read_json, run_app

from tests.integration.test_multinode import tiny_model_dir

pytestmark = pytest.mark.integration
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def family_folder(tmp_path, kind: str, tiny: str):
    """A 2-layer model of the family, random weights, saved with the tiny model's tokenizer (vocabulary 512)."""
    from transformers import AutoModelForCausalLM, BloomConfig, GPT2Config

    config = {"bloom": BloomConfig(n_layer=2, hidden_size=64, n_head=4, vocab_size=512),
              "gpt2": GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=128, bos_token_id=0,
                                 eos_token_id=0)}[kind]
    folder = tmp_path / kind
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (Path(tiny) / name).exists():
            shutil.copy(Path(tiny) / name, folder / name)
    return folder


@pytest.mark.parametrize("kind, targets", [("bloom", ["query_key_value"]), ("gpt2", ["c_attn"])])
def test_lora_trains_the_familys_own_targets(tmp_path, tmp_path_factory, kind, targets):
    folder = family_folder(tmp_path, kind, tiny_model_dir(tmp_path_factory))
    run_dir = tmp_path / "run"
    out = run_app([f"model.name_or_path={folder}", "peft=lora", "trainer.max_steps=2", "save_final_model=false"],
                  run_dir)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert f"peft.target_modules=[{','.join(targets)}], PEFT's own default for {kind}" in out.stdout
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "completed" and summary["steps"] == 2 and math.isfinite(summary["final_loss"])
