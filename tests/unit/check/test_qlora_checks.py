"""A quantized base is refused before launch where the installed libraries would fail or do something else than
asked, each in one line naming the fix (the sources are named in the messages and in docs/qlora.md)."""
import importlib.util
import os
import sys

import pytest

from trl_ds.check.quantization import check_bitsandbytes_here
from trl_ds.check.validate import validate
from trl_ds.errors import ConfigError

QLORA = ["peft=qlora", "model.intermediate_size=384"]  # the tiny model with bitsandbytes' CPU block sizes


@pytest.mark.parametrize("overrides,message", [
    (["zero=stage3", "peft.bnb_4bit_quant_storage=uint8", "+zero.stage3_use_all_reduce_for_fetch_params=true"],
     "zero.stage3_use_all_reduce_for_fetch_params=true with peft.bnb_4bit_quant_storage=uint8: DeepSpeed then "
     "fetches a module's parameters into one flat buffer of one dtype (partition_parameters.py "
     "_all_gather_coalesced: get_only_unique_item raises on the packed uint8 weights beside float32 parameters). "
     "Leave peft.bnb_4bit_quant_storage unset (the training dtype), or drop that option."),
    (["peft.bnb_4bit_quant_storage=int4"], "peft.bnb_4bit_quant_storage=int4 is not a storage dtype bitsandbytes "
                                           "packs into. Use one of float32, bfloat16, float16, uint8"),
    (["peft.bnb_4bit_compute_dtype=bfloat16"],
     "peft.bnb_4bit_compute_dtype=bfloat16 differs from the training dtype float32 (precision): TRL's ModelConfig "
     "has one dtype for both, and the adapters and activations run in the training dtype. Leave it unset, or set "
     "precision=bf16."),
    (["peft.load_in_4bit=false"], "peft=qlora loads the base in 4 bits, and peft.load_in_4bit=false here. Use "
                                  "peft=qlora alone, or peft=lora (peft.load_in_8bit=true for an 8-bit base)."),
    (["peft.load_in_8bit=true"], "peft.load_in_4bit=true and peft.load_in_8bit=true: bitsandbytes loads a base in "
                                 "one of them. Use peft=qlora (4 bits), or peft=lora peft.load_in_8bit=true."),
    (["zero=stage3", "offload=cpu", "offload.param=cpu"],
     "offload.param=cpu with peft.load_in_4bit=true: transformers loads the quantized model whole onto every GPU "
     "before DeepSpeed partitions it, and PEFT's DeepSpeed guide reports ZeRO-3 QLoRA with CPU offload using more "
     "GPU memory than without (Caveats), which trl_ds cannot plan. Use offload.param=none"),
    (["cluster=1x8", "tp=autotp", "tp.size=2"], "tp=autotp with peft=qlora: PEFT wraps each target Linear "
                                                "(q_proj.base_layer), which AutoTP's layer patterns no longer match"),
])
def test_qlora_combinations_refused_naming_the_fix(overrides, message, compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg([*QLORA, *overrides]), "/tmp/run", launching=False)
    assert message in str(err.value)


@pytest.mark.parametrize("overrides,message", [
    (["peft=none", "peft.load_in_4bit=true", "model.intermediate_size=384"],
     "peft.load_in_4bit=true with peft=none: bitsandbytes' quantized weights take no gradients, so only adapters "
     "can train over them. Use peft=qlora (or peft=lora)."),
    (["peft=lora", "peft.bnb_4bit_use_double_quant=true"],
     "peft.bnb_4bit_use_double_quant=true shapes a 4-bit base, and peft.load_in_4bit=false here: nothing would read "
     "it. Use peft=qlora, or remove it."),
    (["peft=qlora", "model=mixtral-8x7b", "cluster=1x8"],
     "peft.load_in_4bit=true with the mixture-of-experts model=mixtral-8x7b: transformers keeps its experts as fused "
     "3-D tensors, which bitsandbytes does not quantize (only nn.Linear)"),
    (["peft=qlora", "trainer.eval_strategy=steps", "trainer.eval_steps=1"],  # the tiny preset: 352 is 5.5 blocks
     "peft=qlora on CPU ranks with evaluation: bitsandbytes' CPU forward without gradients repacks each 4-bit Linear "
     "and needs in_features a multiple of 64 and out_features of 32 (_convert_weight_packed_for_cpu); model=tiny has "
     "down_proj 352→128. Use dimensions that are (e.g. model.intermediate_size=384), or a GPU cluster, or "
     "trainer.eval_strategy=no."),
])
def test_quantized_base_refusals(overrides, message, compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(overrides), "/tmp/run", launching=False)
    assert message in str(err.value)


@pytest.mark.parametrize("overrides", [
    [*QLORA, "zero=stage2"], [*QLORA, "zero=stage3"], [*QLORA, "zero=stage3", "offload=cpu"],
    [*QLORA, "zero=stage3", "trainer=dpo"], [*QLORA, "zero=stage3", "model.model_type=qwen2"],
    # DeepSpeed 0.19.8 all-gathers a module's parameters grouped by dtype: uint8 storage trains at ZeRO-3
    # (tests/integration/test_qlora.py's qwen2 run)
    [*QLORA, "zero=stage3", "peft.bnb_4bit_quant_storage=uint8"],
    # LLM.int8 trained at ZeRO-2 and ZeRO-3 on CPU ranks too (docs/qlora.md: losses and bytes, by hand)
    ["peft=lora", "peft.load_in_8bit=true", "zero=stage2"], ["peft=lora", "peft.load_in_8bit=true", "zero=stage3"],
    # GPUs: the same packed weights stored in bf16 partition under ZeRO-3, and any width is fine there
    ["peft=qlora", "cluster=1x8", "zero=stage3"],
    ["peft=qlora", "save_final_model=false"],  # no forward without gradients: any width trains on CPU
    ["peft=qlora"],  # the tiny preset (352 wide): the final probe runs unpacked (tests/integration/test_qlora.py)
])
def test_combinations_that_train_pass_the_checks(overrides, compose_cfg):
    validate(compose_cfg(overrides), "/tmp/run", launching=False)


def test_a_launch_without_bitsandbytes_names_the_install_command(compose_cfg, monkeypatch):
    """The machine's packages are the one thing replaced here: find_spec answers None for bitsandbytes only."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(
        name, *a))
    # this checkout, run with its .venv (as `make run` does): the command that installs into that .venv
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert check_bitsandbytes_here(compose_cfg(QLORA)) == [
        f"peft.load_in_4bit=true needs bitsandbytes, which is not installed here. Install it: cd {repo} && "
        f"{os.path.relpath(sys.executable, repo) if sys.executable.startswith(repo + os.sep) else sys.executable} "
        f"-m pip install -e '.[qlora]' (bitsandbytes==0.50.2)."]
    assert check_bitsandbytes_here(compose_cfg(["peft=lora"])) == []


def test_the_install_command_follows_how_trl_ds_was_installed(tmp_path):
    from trl_ds.python_path import install_command

    checkout = tmp_path / "trl_ds_checkout"
    (checkout / "trl_ds").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'trl_ds'\n")
    package_file = str(checkout / "trl_ds" / "python_path.py")
    assert install_command("qlora", "bitsandbytes==0.50.2", package_file, str(checkout / ".venv/bin/python")) == (
        f"cd {checkout} && .venv/bin/python -m pip install -e '.[qlora]' (bitsandbytes==0.50.2)")
    site = tmp_path / "lib/python3.11/site-packages"  # a wheel: no pyproject.toml beside the package
    (site / "trl_ds").mkdir(parents=True)
    assert install_command("qlora", "bitsandbytes==0.50.2", str(site / "trl_ds" / "python_path.py"),
                           "/usr/bin/python3") == (
        "/usr/bin/python3 -m pip install 'trl_ds[qlora]' (bitsandbytes==0.50.2)")
