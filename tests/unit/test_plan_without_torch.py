"""Planning a family that used to be counted on the meta device (starcoder2, olmoe, gpt2, gpt_neox, falcon, glm4,
glm4_moe, gpt_oss, qwen3_next: 3.7-9 s here, most of it importing torch and transformers) now counts it from its
config: torch is never imported, and the whole command answers in about the time of a preset's plan (0.3-0.5 s on an
idle machine). The machine running the tests is shared, so the time is held to a preset's measured beside it, with a
wide margin; importing torch alone took 4 s there."""
import json
import sys

import pytest
from conftest import run_for_cpu
from test_model_families import instantiate, meta_counts, write_config
from transformers import AutoConfig

# whole commands, each timed against a preset's plan beside it: make test runs them, make test-fast leaves them out
pytestmark = pytest.mark.slow

# The published configs' dimensions (bigcode/starcoder2-3b, allenai/OLMoE-1B-7B-0924 config.json), fewer layers.
CONFIGS = {
    "starcoder2": {"model_type": "starcoder2", "vocab_size": 49152, "hidden_size": 3072, "intermediate_size": 12288,
                   "num_hidden_layers": 4, "num_attention_heads": 24, "num_key_value_heads": 2, "use_bias": True,
                   "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0},
    "olmoe": {"model_type": "olmoe", "vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 1024,
              "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
              "num_experts_per_tok": 8, "pad_token_id": 1, "eos_token_id": 50279},
}
# The families counted from their config since: transformers' reference configs (AutoConfig.for_model(TYPE), as
# save_pretrained writes them: gpt2 124M, gpt_neox 20B, falcon 7B, glm4 9B, GLM-4.5-Air-like glm4_moe, gpt-oss 20B,
# Qwen3-Next 80B-A3B, SmolLM3 3B, OLMo-3 7B), two layers (glm4_moe: a dense one and an MoE one; four for Qwen3-Next:
# three linear-attention layers and a full one).
for kind, layers, count in (("gpt2", "n_layer", 2), ("gpt_neox", "num_hidden_layers", 2),
                            ("falcon", "num_hidden_layers", 2), ("glm4", "num_hidden_layers", 2),
                            ("glm4_moe", "num_hidden_layers", 2), ("smollm3", "num_hidden_layers", 2),
                            ("olmo3", "num_hidden_layers", 2),
                            ("gpt_oss", "num_hidden_layers", 2), ("qwen3_next", "num_hidden_layers", 4)):
    CONFIGS[kind] = {**AutoConfig.for_model(kind).to_dict(), layers: count}
    CONFIGS[kind].pop("layer_types", None)  # one per layer: transformers rebuilds them for the fewer layers
PLAN = ("import sys; from trl_ds.cli.plan import main; main(['{model}', 'cluster=1x8', '--json']); "
        "print('torch' in sys.modules, 'transformers' in sys.modules, file=sys.stderr)")


def plan(model: str):
    """(stdout, stderr, CPU seconds of the whole process, interpreter start included)."""
    out, cpu = run_for_cpu([sys.executable, "-c", PLAN.format(model=model)], capture_output=True, text=True,
                           timeout=120, check=True)
    return out.stdout, out.stderr, cpu


@pytest.fixture(scope="module")
def preset_cpu():
    return plan("model=llama3-8b")[2]


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_planning_a_formerly_meta_family_imports_no_torch(tmp_path, model_type, preset_cpu):
    raw = CONFIGS[model_type]
    folder = write_config(tmp_path / model_type, raw)
    stdout, stderr, cpu = plan(f"model.name_or_path={folder}")
    assert stderr.split()[-2:] == ["False", "False"]  # neither torch nor transformers
    assert cpu < 3 * preset_cpu + 1.0
    total, _, _ = meta_counts(instantiate(AutoConfig.for_model(**raw)))
    assert json.loads(stdout)["parameters"] == total
