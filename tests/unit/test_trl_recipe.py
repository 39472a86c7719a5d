"""trainer.from_trl_config: a `trl <cmd> --config` recipe in TRL's documentation style, mapped onto trl_ds's keys."""

import json

import yaml
from conftest import run_app
from test_trainer_yaml import parse_like_trl_cli

# The shape of TRL's documented SFT recipe (docs: "trl sft --config sft_config.yaml"), with bf16: false since TRL's
# default (bf16 unless fp16) needs a GPU to parse; the dataset is a hub name (a dry run downloads nothing).
RECIPE = """\
# trl sft --config sft_config.yaml
model_name_or_path: {model}
dataset_name: trl-lib/Capybara
learning_rate: 2.0e-5
num_train_epochs: 1
packing: true
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
gradient_checkpointing: true
eos_token: <|im_end|>
eval_strategy: steps
eval_steps: 100
use_peft: true
lora_r: 32
lora_alpha: 16
output_dir: Qwen2-0.5B-SFT
bf16: false
"""


def test_a_trl_recipe_round_trips(tmp_path):
    """Every argument of the recipe reaches TRL's parser with the value TRL itself reads from the recipe, except
    output_dir (the run dir), reported as not used; each mapping is printed."""
    recipe = tmp_path / "sft_config.yaml"
    recipe.write_text(RECIPE.format(model=tmp_path / "model"))
    (tmp_path / "model").mkdir()  # the recipe's model: the planner reads its architecture from config.json
    (tmp_path / "model" / "config.json").write_text(json.dumps(
        {"model_type": "qwen2", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True}))
    run_dir = tmp_path / "run"
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    for line in ("  trainer.args.packing=true", "  peft.name=lora", "  peft.r=32", "  trainer.max_steps=-1",
                 "  trainer.gradient_accumulation_steps=8", "  output_dir: Qwen2-0.5B-SFT not used: trl_ds writes "
                 "into the run dir (hydra.run.dir)"):
        assert line + "\n" in out.stdout
    ours = parse_like_trl_cli("sft", run_dir / "trainer.yaml")[0]
    theirs = parse_like_trl_cli("sft", recipe)[0]
    names = set(yaml.safe_load(recipe.read_text())) - {"output_dir"}
    for name in names:
        got = [getattr(obj, name) for obj in ours if hasattr(obj, name)]
        want = [getattr(obj, name) for obj in theirs if hasattr(obj, name)]
        assert got == want, name
    assert ours[1].output_dir == "./trainer"  # relative to the run dir, where TRL's CLI runs


def test_the_command_line_wins_over_the_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("learning_rate: 0.5\nlogging_steps: 3\n")
    run_dir = tmp_path / "run"
    out = run_app([f"trainer.from_trl_config={recipe}", "trainer.learning_rate=0.01", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    assert "trainer.learning_rate=0.5 (recipe) overridden on the command line" in out.stdout
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    assert (saved["learning_rate"], saved["logging_steps"]) == (0.01, 3)


def test_what_cannot_be_honoured_is_refused_all_at_once(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("deepspeed: ds.json\noptim: sgd\nsave_strategy: epoch\npackin: true\nlearning_rate: fast\n")
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], tmp_path / "run")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    where = f"trainer.from_trl_config={recipe}"
    for message in (f"{where}: deepspeed: ds.json cannot be honoured: trl_ds sets deepspeed from zero=stage0..3 and "
                    f"offload=none|cpu|nvme (trl_ds writes ds_config.json). Drop it from the recipe.",
                    f"{where}: optim: sgd cannot be honoured",
                    f"{where}: save_strategy: epoch cannot be honoured: trl_ds sets save_strategy from "
                    f"checkpoint.every_steps.",
                    f"{where}: trainer.learning_rate=fast: Value 'fast' of type 'str' could not be converted to Float"):
        assert message in out.stderr, out.stderr
    assert not (tmp_path / "run").exists()


def test_an_unknown_recipe_argument_goes_through_the_name_check(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("packin: true\n")
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], tmp_path / "run")
    assert out.returncode == 2
    assert "trainer.args.packin=true: trainer=sft has no argument packin" in out.stderr
