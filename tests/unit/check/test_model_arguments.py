"""Every field of TRL's ModelConfig that trainer.args accepts is applied (by the worker's from_pretrained or by TRL's
get_peft_config) or refused before launch, naming what to use instead."""
import pytest

from trl_ds.check.trl_arguments import APPLIED_BY_WORKER, MAPPED, OWNED, PEFT_ONLY, class_fields
from trl_ds.check.validate import validate
from trl_ds.errors import ConfigError


def test_every_model_config_field_has_a_fate():
    """A field TRL adds later fails here until it is applied or refused."""
    fates = set(APPLIED_BY_WORKER) | set(PEFT_ONLY) | set(OWNED) | set(MAPPED)
    assert set(class_fields("ModelConfig")) - fates == set()


def test_the_worker_applies_its_fields_to_from_pretrained():
    from transformers import TrainingArguments
    from trl import ModelConfig

    from trl_ds.worker.trainers import model_kwargs

    args = ModelConfig(model_name_or_path="x", model_revision="v1.0", attn_implementation="eager")
    kwargs = model_kwargs(args, TrainingArguments(output_dir="/tmp/unused", use_cpu=True))
    assert {kwargs[arg] for arg in APPLIED_BY_WORKER.values()} == {"v1.0", "eager"}
    assert str(kwargs["dtype"]) == "torch.float32"


def test_the_worker_loads_a_model_folder_at_its_revision(tmp_path):
    """load_model with TRL's ModelConfig on a real saved folder (a local folder has the one revision main)."""
    from transformers import TrainingArguments
    from trl import ModelConfig

    from trl_ds.config.compose import compose
    from trl_ds.worker.models import save_tiny_model
    from trl_ds.worker.trainers import load_model

    save_tiny_model(compose([]).model, str(tmp_path / "m"), seed=1)
    args = ModelConfig(model_name_or_path=str(tmp_path / "m"), model_revision="main", attn_implementation="eager")
    model = load_model("sft", args, TrainingArguments(output_dir=str(tmp_path), use_cpu=True))
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize("override,message", [
    # unmapped (validate alone; a launch and trl-ds plan move them onto peft.* first: test_qlora_config.py)
    ("+trainer.args.load_in_4bit=true", "trainer.args.load_in_4bit=true: trl_ds reads it as peft.load_in_4bit. Use "
                                        "peft.load_in_4bit=true instead (with peft=lora or peft=qlora)."),
    ("+trainer.args.use_bnb_nested_quant=true", "Use peft.bnb_4bit_use_double_quant=true instead"),
    ("+trainer.args.use_peft=true", "trl_ds sets use_peft itself. Use peft=lora instead."),
    ("+trainer.args.lora_r=16", "Use peft.r=16 instead."),
    ("+trainer.args.dtype=bfloat16", "Use precision instead."),
    ("+trainer.args.use_dora=true", "trainer.args.use_dora=true shapes the LoRA adapters, and peft=none here: "
                                    "nothing would read it. Add peft=lora, or remove it."),
])
def test_model_config_fields_refused_naming_the_fix(override, message, compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg([override]), "/tmp/run", launching=False)
    assert message in str(err.value)


def test_lora_options_with_peft_lora_reach_trls_lora_config(compose_cfg):
    """Accepted with peft=lora: TRL's own get_peft_config reads them into peft's LoraConfig."""
    import trl
    from trl import ModelConfig

    from trl_ds.cli.app import build

    prepared = build(compose_cfg(["peft=lora", "+trainer.args.use_dora=true", "+trainer.args.use_rslora=true"]),
                     "/tmp/run", launching=False)
    fields = set(ModelConfig.__dataclass_fields__)
    lora = trl.get_peft_config(ModelConfig(**{k: v for k, v in prepared.trainer_args.items() if k in fields}))
    assert (lora.use_dora, lora.use_rslora) == (True, True)
