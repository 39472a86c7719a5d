"""trainer.from_trl_config: a `trl <cmd> --config` recipe in TRL's documentation style, mapped onto trl_ds's keys."""

import json
from pathlib import Path

import pytest
import yaml
from conftest import run_app

from tests.unit.rundir.test_trainer_yaml import parse_like_trl_cli
from trl_ds.check.trl_arguments import trainer_fields

pytestmark = pytest.mark.slow  # recipes through the whole resolve and TRL's parser: make test only

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
    for line in ("  packing: true -> trainer.args.packing=true", "  use_peft: true -> peft.name=lora",
                 "  lora_r: 32 -> peft.r=32", "  num_train_epochs: 1 -> trainer.max_steps=-1",
                 "  gradient_accumulation_steps: 8 -> trainer.gradient_accumulation_steps=8",
                 "  output_dir: Qwen2-0.5B-SFT not used: trl_ds writes into the run dir (hydra.run.dir)"):
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
    assert "  learning_rate: 0.5 -> trainer.learning_rate=0.5: overridden on the command line\n" in out.stdout
    assert "  logging_steps: 3 -> trainer.logging_steps=3\n" in out.stdout
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    assert (saved["learning_rate"], saved["logging_steps"]) == (0.01, 3)


def test_what_cannot_be_honoured_is_refused_all_at_once(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("deepspeed: ds.json\noptim: sgd\nsave_strategy: best\npackin: true\nlearning_rate: fast\n")
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], tmp_path / "run")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    where = f"trainer.from_trl_config={recipe}"
    for message in (f"{where}: deepspeed: ds.json cannot be honoured: trl_ds sets deepspeed from zero=stage0..3 and "
                    f"offload=none|cpu|nvme (trl_ds writes ds_config.json). Drop it from the recipe.",
                    f"{where}: optim: sgd cannot be honoured: trl_ds trains with the AdamW block of ds_config.json, "
                    f"and with a DeepSpeed optimizer block transformers ignores optim, so sgd would silently train "
                    f"AdamW. Drop optim, or write optim: adamw_torch.",
                    f"{where}: save_strategy: best cannot be honoured: trl_ds checkpoints by steps, epoch or no.",
                    f"{where}: trainer.learning_rate=fast: Value 'fast' of type 'str' could not be converted to Float"):
        assert message in out.stderr, out.stderr
    assert not (tmp_path / "run").exists()


def test_an_unknown_recipe_argument_goes_through_the_name_check(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("packin: true\n")
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], tmp_path / "run")
    assert out.returncode == 2
    assert "trainer.args.packin=true: trainer=sft has no argument packin" in out.stderr


IMPORTED = Path(__file__).resolve().parents[2] / "data" / "imported"


def test_choosing_the_trainer_group_keeps_the_recipes_values(tmp_path):
    """Why 1: `trainer=sft` chooses a preset and gives no key, so TRL's own example recipe is honoured in full
    (before: every value printed as overridden, learning_rate 0.001, constant schedule, the tiny dataset)."""
    recipe = IMPORTED / "trl_example_config.yaml"
    run_dir = tmp_path / "run"
    out = run_app(["trainer=sft", f"trainer.from_trl_config={recipe}", "model=qwen2.5-0.5b", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    assert "overridden on the command line" not in out.stdout
    want = yaml.safe_load(recipe.read_text())  # the oracle: the recipe as TRL's parser reads it
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    for name in ("model_name_or_path", "dataset_name", "report_to", "learning_rate", "lr_scheduler_type"):
        assert saved[name] == want[name], name


def test_a_dpo_recipe_keeps_its_rate_and_beta_under_trainer_dpo(tmp_path):
    """Why 1: a DPO recipe needs trainer=dpo; its learning_rate and beta were replaced by the preset's (1e-3, 0.1)."""
    recipe = tmp_path / "dpo.yaml"
    recipe.write_text("learning_rate: 5.0e-07\nbeta: 0.01\n")
    run_dir = tmp_path / "run"
    out = run_app(["trainer=dpo", f"trainer.from_trl_config={recipe}", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    assert "  beta: 0.01 -> trainer.beta=0.01\n" in out.stdout
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    assert (saved["learning_rate"], saved["beta"]) == (5e-7, 0.01)
    assert json.loads((run_dir / "ds_config.json").read_text())["optimizer"]["params"]["lr"] == 5e-7


def test_values_trl_takes_are_honoured(tmp_path):
    """Why 2: report_to as a list, torch_dtype null, optim adamw_torch and save_strategy epoch were refused; TRL's
    parser takes each, and trainer.yaml now carries what TRL would read."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("report_to: [tensorboard, wandb]\ntorch_dtype: null\noptim: adamw_torch\n"
                      "save_strategy: epoch\nsave_steps: 7\n")
    run_dir = tmp_path / "run"
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    for line in ("  torch_dtype: null: unset; precision=auto decides (bf16 on GPUs, fp32 on CPU)",
                 "  optim: adamw_torch: AdamW, as ds_config.json's DeepSpeed AdamW optimizer block (with that block "
                 "transformers trains it whatever optim says)",
                 "  save_strategy: epoch -> checkpoint.every_epoch=true", "  save_steps: 7 not used: save_strategy is "
                 "epoch"):
        assert line + "\n" in out.stdout
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    assert (saved["report_to"], saved["save_strategy"]) == (["tensorboard", "wandb"], "epoch")
    args = parse_like_trl_cli("sft", run_dir / "trainer.yaml")[0][1]  # TRL's own parser reads it back
    assert (args.report_to, args.save_strategy) == (["tensorboard", "wandb"], "epoch")


def test_save_steps_alone_saves_by_steps_and_an_unknown_tracker_is_refused(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("save_steps: 4\n")
    run_dir = tmp_path / "run"
    assert run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], run_dir).returncode == 0
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    assert (saved["save_strategy"], saved["save_steps"]) == ("steps", 4)  # transformers' default strategy is steps
    recipe.write_text("report_to: [tensorboard, wandbb]\n")
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], tmp_path / "run2")
    assert out.returncode == 2
    assert "trainer.report_to=[tensorboard,wandbb]: transformers knows no integration wandbb." in out.stderr


def test_fields_an_older_trl_had_are_named_with_their_replacement(tmp_path):
    recipe = tmp_path / "r.yaml"
    removed = ("max_seq_length", "overwrite_output_dir", "warmup_ratio")
    assert not set(removed) & set(trainer_fields("sft"))  # the installed TRL and transformers: none of them
    recipe.write_text("max_seq_length: 512\noverwrite_output_dir: true\nwarmup_ratio: 0.1\n")
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], tmp_path / "run")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    where = f"trainer.from_trl_config={recipe}"
    for message in (f"{where}: max_seq_length: 512: the installed TRL has no max_seq_length: TRL renamed it max_length:"
                    f" write max_length: 512.",
                    f"{where}: overwrite_output_dir: True: the installed TRL has no overwrite_output_dir: transformers"
                    f" 5 removed it;",
                    f"{where}: warmup_ratio: 0.1: the installed TRL has no warmup_ratio: transformers 5 removed it; "
                    f"warmup_steps takes a fraction below 1: write warmup_steps: 0.1"):
        assert message in out.stderr, out.stderr


def test_a_multi_line_recipe_value_is_named_on_one_line(tmp_path):
    """alignment-handbook recipes carry a chat_template of many lines (a handbook field, not TRL's): the refusal
    stays one line, the template's start shown with its line breaks as \\n."""
    template = "{% for message in messages %}\n{{ message['content'] }}\n{% endfor %}" * 5
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"chat_template": template}))
    out = run_app([f"trainer.from_trl_config={recipe}", "dry_run=true"], tmp_path / "run")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "chat_template={% for message in messages %}\\n{{ message['content'] }}\\n{% endfor %}" in out.stderr
    assert f"... ({len(template)} characters): trainer=sft has no argument chat_template" in out.stderr
