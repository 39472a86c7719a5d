"""QLoRA on 2 CPU ranks through trl_ds's worker with real DeepSpeed and bitsandbytes: a 4-bit NF4 base with double
quantization stored in fp32 (the training dtype), LoRA adapters on q/k/v/o.

Two short runs, shared by every test here: the tiny Llama at ZeRO-2 with a checkpoint every 2 steps (then resumed
to 6 steps in the same run dir), and the tiny model as a Qwen2 (q/k/v biases beside the packed weights) at ZeRO-3
with every tensor partitioned, the packed weights stored in uint8 and the adapters' optimizer offloaded to the CPU.
The tiny FFN is 384 wide: bitsandbytes' eval-mode CPU forward without gradients (evaluation) needs whole blocks of 64
(check/quantization.py); the default 352 trains too (its probe runs unpacked: the last test).
"""
import json
import math

import pytest
from conftest import read_json, require, run_app

pytestmark = [pytest.mark.integration, pytest.mark.beside, pytest.mark.xdist_group("beside")]

QLORA = ["peft=qlora", "model.intermediate_size=384", "trainer.max_steps=4"]
# qwen2 at ZeRO-3: every tensor partitioned (threshold 0) and gathered per module, the packed weights stored in uint8
# beside fp32 biases and bf16 adapters (DeepSpeed 0.19.8 all-gathers grouped by dtype; check/quantization.py), and
# DeepSpeedCPUAdam stepping the adapters' fp32 master partition on the host (offload=cpu)
RUNS = {"llama-stage2": [*QLORA, "zero=stage2", "checkpoint.every_steps=2"],
        "qwen2-stage3-offload": [*QLORA, "zero=stage3", "offload=cpu", "model.model_type=qwen2",
                                 "peft.bnb_4bit_quant_storage=uint8", "zero.stage3_param_persistence_threshold=0"]}
KINDS = ("params", "gradients", "optimizer")
_done = {}


def run(name, tmp_path_factory):
    """(run dir, loss records) of the named run, trained once per session."""
    require(__import__("importlib").util.find_spec("bitsandbytes") is not None,
            "bitsandbytes (pip install 'trl_ds[qlora]'; make test installs it)")
    if name not in _done:
        run_dir = tmp_path_factory.mktemp(name) / "run"
        out = run_app(RUNS[name], run_dir)
        assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        _done[name] = (run_dir, losses(run_dir))
    return _done[name]


def run_unpacked(model):
    """bitsandbytes' 4-bit layers on their unpacked CPU path (the weight dequantized to the compute dtype), as
    trl_ds's final probe runs them: in eval mode without gradients they would repack for a bf16 CPU kernel."""
    for module in model.modules():
        if type(module).__name__ == "Linear4bit" and type(module).__module__.startswith("bitsandbytes"):
            module.training = True


def losses(run_dir):
    with open(run_dir / "metrics.jsonl") as f:
        return [json.loads(line) for line in f if '"loss"' in line]


@pytest.mark.parametrize("name", list(RUNS))
def test_qlora_trains_only_adapters_over_a_4bit_base(name, tmp_path_factory):
    run_dir, records = run(name, tmp_path_factory)
    values = [r["loss"] for r in records]
    assert [r["step"] for r in records] == [1, 2, 3, 4] and all(map(math.isfinite, values))
    assert values[-1] < values[0] - 0.1  # lr 1e-3 on the adapters moves the loss within 4 steps
    summary = read_json(run_dir / "summary.json")
    assert summary["trainable_parameters"] == 4 * 8 * ((128 + 128) + 2 * (128 + 64) + (128 + 128)) == 28_672
    model = read_json(run_dir / "model" / "config.json")
    assert model["model_type"] == name.split("-")[0]


@pytest.mark.parametrize("name", list(RUNS))
def test_measured_bytes_equal_the_plans_within_1_percent(name, tmp_path_factory):
    """memory/rank_K.json counts the engine's tensors after training, bitsandbytes' QuantState included; plan.json
    holds the estimate made before launch. The parameters are the 4-bit case's own: packed weights at n/2 bytes,
    constants whole on every rank, the rest in fp32, the adapters in bf16."""
    run_dir, _ = run(name, tmp_path_factory)
    plan = read_json(run_dir / "plan.json")["current"]["after_step_bytes"]
    estimated = {k: sum(plan.get(k, {}).values()) for k in KINDS}
    for rank in (0, 1):
        held = read_json(run_dir / "memory" / f"rank_{rank}.json")["model_states"]
        measured = {k: sum(held[k].values()) for k in KINDS}
        for kind in KINDS:
            assert measured[kind] == pytest.approx(estimated[kind], rel=0.01, abs=0.01 * sum(estimated.values()))
    # by hand (tests/unit/plan/test_qlora_plan.py): 979,456 bytes of parameters and 43,072 of constants at ZeRO-2
    if name == "llama-stage2":
        assert measured["params"] == 979_456 + 43_072


def test_with_optimizer_offload_the_adapters_states_are_on_the_host_as_planned(tmp_path_factory):
    """offload=cpu over a 4-bit base: the 28,672 adapters' fp32 master and Adam moments (12 B each, DeepSpeedCPUAdam)
    sit on the host, 14,336 per rank at ZeRO-3 over 2 ranks; the host column counts them with the fp32 gradient
    partition DeepSpeed keeps beside them (4 B each), per node, and nothing of the optimizer on the device."""
    run_dir, _ = run("qwen2-stage3-offload", tmp_path_factory)
    current = read_json(run_dir / "plan.json")["current"]
    assert current["after_step_bytes"]["optimizer"] == {"host": 12 * 14_336}
    assert current["device_bytes"]["optimizer"] == 0
    assert current["host_bytes"]["model_states"] == 2 * (12 + 4) * 14_336
    for rank in (0, 1):
        memory = read_json(run_dir / "memory" / f"rank_{rank}.json")
        assert memory["optimizer_class"] == "DeepSpeedCPUAdam"
        assert memory["model_states"]["optimizer"] == {"cpu": 12 * 14_336}


@pytest.mark.parametrize("name", list(RUNS))
def test_saved_adapters_reload_on_the_4bit_base_with_the_engines_logits(name, tmp_path_factory):
    """final_model/ holds the adapters only; PEFT loads them onto the base model quantized by bitsandbytes with the
    same settings (written here, not read from trl_ds), adapters cast to bf16 as TRL trained them, and reproduces
    the trained engine's logits (probe_logits.pt) within 1e-4."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    run_dir, _ = run(name, tmp_path_factory)
    final = run_dir / "final_model"
    adapter = load_file(final / "adapter_model.safetensors")
    assert len(adapter) == 4 * 4 * 2 and all(v.abs().sum() > 0 for v in adapter.values())
    assert not (final / "model.safetensors").exists()
    storage = torch.uint8 if name.startswith("qwen2") else torch.float32
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=torch.float32, bnb_4bit_quant_storage=storage)
    base = AutoModelForCausalLM.from_pretrained(run_dir / "model", quantization_config=bnb, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, final).eval()
    for param_name, p in model.named_parameters():
        if "lora_" in param_name:
            p.data = p.data.to(torch.bfloat16)
    run_unpacked(model)  # as the probe ran: the packed CPU kernel computes in bf16 (about 1e-3 apart)
    probe = torch.load(final / "probe_logits.pt")
    with torch.no_grad():
        logits = model(input_ids=probe["input_ids"]).logits.float()
        assert torch.allclose(logits, probe["logits"], rtol=1e-4, atol=1e-4)
        with model.disable_adapter():  # the adapters matter: the 4-bit base alone differs
            assert (model(input_ids=probe["input_ids"]).logits.float() - logits).abs().max() > 1e-4


def test_a_qlora_run_resumes_from_its_checkpoint(tmp_path_factory):
    """The ZeRO-2 run saved checkpoint-2 and checkpoint-4; relaunched with trainer.max_steps=6 in the same run dir
    it resumes from checkpoint-4 (adapters, optimizer, step) and trains steps 5 and 6 only."""
    run_dir, first = run("llama-stage2", tmp_path_factory)
    assert sorted(p.name for p in (run_dir / "trainer").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    out = run_app([*RUNS["llama-stage2"], "trainer.max_steps=6"], run_dir)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert f"trl_ds: resuming from {run_dir / 'trainer' / 'checkpoint-4'}" in out.stderr  # before spawning
    assert read_json(run_dir / "summary.json")["steps"] == 6
    records = losses(run_dir)  # both launches append: steps 1-4 once, then 5 and 6, none trained twice
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    resumed = records[4:]
    assert all(math.isfinite(r["loss"]) for r in resumed)
    assert max(r["loss"] for r in resumed) < first[0]["loss"]  # it continued from trained adapters, not from scratch


@pytest.mark.light
def test_the_issues_command_without_peft_is_refused_in_one_line_before_launch(tmp_path):
    """`+trainer.args.load_in_4bit=true` (TRL's ModelConfig name) reaches peft.load_in_4bit; without adapters nothing
    could train over the frozen 4-bit weights: exit 2, one line naming the fix, nothing spawned."""
    out = run_app(["+trainer.args.load_in_4bit=true", "model.intermediate_size=384"], tmp_path / "run")
    assert out.returncode == 2
    assert out.stderr == ("trl_ds: peft.load_in_4bit=true with peft=none: bitsandbytes' quantized weights take no "
                          "gradients, so only adapters can train over them. Use peft=qlora (or peft=lora).\n")
    assert not (tmp_path / "run" / "logs").exists()


def test_qlora_trains_on_the_default_tiny_model(tmp_path):
    """`python -m trl_ds peft=qlora` as a newcomer types it: the tiny preset's down_proj (352 -> 128) is not in
    bitsandbytes' CPU packing blocks, which its eval-mode forward without gradients needs; trl_ds's final probe runs
    unpacked, and the adapters reloaded onto the 4-bit base (run unpacked the same way) give the probe's logits."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    require(__import__("importlib").util.find_spec("bitsandbytes") is not None,
            "bitsandbytes (pip install 'trl_ds[qlora]'; make test installs it)")
    run_dir = tmp_path / "run"
    out = run_app(["peft=qlora", "trainer.max_steps=2"], run_dir)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert [row["step"] for row in losses(run_dir)] == [1, 2]
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(run_dir / "model", quantization_config=bnb, dtype=torch.float32)
    assert base.config.intermediate_size == 352
    model = PeftModel.from_pretrained(base, run_dir / "final_model").eval()
    for param_name, p in model.named_parameters():
        if "lora_" in param_name:
            p.data = p.data.to(torch.bfloat16)
    run_unpacked(model)
    probe = torch.load(run_dir / "final_model" / "probe_logits.pt")
    with torch.no_grad():
        logits = model(input_ids=probe["input_ids"]).logits.float()
    assert torch.allclose(logits, probe["logits"], rtol=1e-4, atol=1e-4)
