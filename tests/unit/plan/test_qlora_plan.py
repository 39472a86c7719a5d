"""The planner's bytes for a 4-bit base: counted by hand from bitsandbytes' storage, checked against bitsandbytes'
own tensors, and PEFT's published QLoRA + ZeRO-3 case (docs/source/accelerate/deepspeed.md in huggingface/peft,
"Use PEFT QLoRA and DeepSpeed with ZeRO3 for finetuning large models on multiple GPUs")."""
import pytest
from conftest import require

from trl_ds.plan.memory import GiB, estimate, setup_from_config
from trl_ds.plan.planner import grid, not_fit_message
from trl_ds.plan.quantized import state_bytes

TINY_QLORA = ["peft=qlora", "model.intermediate_size=384"]
ALL_LINEAR = "peft.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"
# PEFT's run: meta-llama/Llama-2-70b-hf (vocab 32000, hidden 8192, FFN 28672, 80 layers, 64 heads, 8 KV heads),
# 2 GPUs of 40 GB, ZeRO-3 without offload, bf16, 2048 tokens, micro-batch 2 × accumulation 2, gradient
# checkpointing, LoRA r 8 / alpha 16 / dropout 0.1 on all linear layers, NF4 with double quantization stored in bf16
PEFT_CASE = ["model=llama3-70b", "model.vocab_size=32000", "model.max_position_embeddings=4096", "cluster=1x8",
             "cluster.gpus_per_node=2", "cluster.gpu_memory_gb=40", "precision=bf16", "zero=stage3",
             "trainer.max_length=2048", "trainer.per_device_train_batch_size=2", "batch.global_size=8",
             "trainer.gradient_checkpointing=true", "peft=qlora", ALL_LINEAR, "peft.lora_dropout=0.1"]
PEFT_REPORTED_GB = 36.6


def tiny_weights():
    """(in, out) of the tiny model's 7 Linear weights per layer, 4 layers: hidden 128, KV width 64, FFN 384."""
    return [(128, 128), (128, 64), (128, 64), (128, 128), (128, 384), (128, 384), (384, 128)] * 4


def test_the_tiny_qlora_models_bytes_by_hand(compose_cfg):
    """Embedding and lm_head 512 × 128 and 9 norms of 128 in fp32; 786,432 quantized elements at half a byte;
    LoRA r 8 on q/k/v/o (28,672 adapters) in bf16 as TRL casts them; double-quantized constants per weight:
    a uint8 absmax per 64, an fp32 absmax per 256 blocks, the 256-entry and 16-entry fp32 codes, the fp32 offset."""
    s = setup_from_config(compose_cfg(TINY_QLORA))
    assert s.quantized == sum(i * o for i, o in tiny_weights()) == 786_432
    assert s.param_bytes == 4 * (2 * 512 * 128 + 9 * 128) + 786_432 // 2 + 2 * 28_672 == 979_456
    constants = sum(n // 64 + 4 * -(-(n // 64) // 256) + 256 * 4 + 4 + 16 * 4 for n in (i * o for i, o in
                                                                                        tiny_weights()))
    assert s.quant_constants == constants == 43_072
    two, three = estimate(s), estimate(setup_from_config(compose_cfg([*TINY_QLORA, "zero=stage3"])))
    assert two.after_step["params"] == {"device": 979_456 + 43_072}
    # ZeRO-3: a partition of everything, plus every tensor below the persistence threshold (here all) whole
    assert three.after_step["params"] == {"device": 979_456 // 2 + 979_456 + 43_072}


@pytest.mark.parametrize("shape,double_quant", [((128, 384), True), ((384, 128), False), ((8192, 1024), True)])
def test_quantization_constants_are_bitsandbytes_own(shape, double_quant):
    """Params4bit quantized on the CPU by the installed bitsandbytes: its packed weight and QuantState tensors."""
    require(__import__("importlib").util.find_spec("bitsandbytes") is not None, "bitsandbytes (pip install "
                                                                               "'trl_ds[qlora]')")
    import torch
    from bitsandbytes.nn import Params4bit

    from trl_ds.worker.measure import quant_state_tensors

    i, o = shape
    p = Params4bit(torch.zeros(o, i), requires_grad=False, compress_statistics=double_quant, quant_type="nf4",
                   quant_storage=torch.float32).to("cpu")
    assert p.numel() * p.element_size() == i * o // 2
    held = sum(t.numel() * t.element_size() for t in quant_state_tensors(p) if t is not None)
    assert held == state_bytes(i * o, o, 4, double_quant)


def test_peft_published_qlora_zero3_case_fits_and_its_36_6_gb_is_the_whole_4bit_model():
    """Hand count of the 4-bit Llama-2-70B every rank holds before DeepSpeed partitions it (transformers loads a
    quantized model without zero.Init): 68,451,041,280 Linear elements at half a byte, embedding and lm_head
    (2 × 32000 × 8192) and 161 norms of 8192 in bf16, 103,546,880 adapters in bf16, and the double-quantized
    constants. 36.57 GB: the guide's 36.6 GB per GPU to 0.1 %. The training step's peak, partitioned, is below it;
    the estimate (37.1 GiB with the allocator margin and CUDA context) fits the 40 GB GPUs."""
    from trl_ds.config.compose import compose

    s = setup_from_config(compose(PEFT_CASE))
    linear = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    assert (s.quantized, s.trainable) == (linear, 103_546_880) == (68_451_041_280, 103_546_880)
    per_layer_constants = sum(b + 4 * -(-b // 256) + 1024 + 4 + 64 for b in (
        8192 * 8192 // 64, 8192 * 1024 // 64, 8192 * 1024 // 64, 8192 * 8192 // 64, *[8192 * 28672 // 64] * 3))
    whole = linear // 2 + 2 * (2 * 32000 * 8192 + 161 * 8192) + 2 * 103_546_880 + 80 * per_layer_constants
    assert s.param_bytes + s.quant_constants == whole == 36_570_698_944
    assert abs(whole / 1e9 - PEFT_REPORTED_GB) / PEFT_REPORTED_GB < 0.001
    e = estimate(s)
    assert e.verdict == "fits" and e.device_total < 40 * GiB
    assert e.device_total == pytest.approx(36.83 * GiB, rel=0.002)  # docs/qlora.md's figure (37.07 before #62)
    assert e.device["quantized_load"] == 0  # the step's peak (with its margins) is above the load peak here


def test_a_config_that_fits_nowhere_names_qlora_and_the_grid_never_quantizes(compose_cfg):
    """Llama 3 8B with LoRA on one 12 GiB GPU and 24 GiB of host RAM: only NVMe offload fits it (the issue: the plan
    "sends the user to NVMe offload"); a 4-bit base (5.3 GiB of weights) would fit without, and the planner says so
    without choosing it."""
    cfg = compose_cfg(["model=llama3-8b", "cluster=1x1", "cluster.gpu_memory_gb=12", "cluster.cpu_memory_gb=24",
                       "peft=lora", "precision=bf16", "trainer.max_length=512",
                       "trainer.per_device_train_batch_size=1"])
    s = setup_from_config(cfg)
    assert all(e.setup.quant_bits == 0 for e in grid(s))
    message = not_fit_message(cfg, estimate(s))
    assert "The smallest change that fits: zero=stage3 offload=nvme" in message
    # at ZeRO-2: a quantized base loads one tensor at a time (2.9 GiB of the 24 GiB of host RAM here), where a
    # 16-bit one materialises 4 B per parameter (45 GiB)
    assert message.endswith("A 4-bit base with LoRA adapters would fit (it trains adapters over a frozen base): "
                            "peft=qlora trainer.gradient_checkpointing=true (estimated 9.5 GiB per rank).")


@pytest.mark.parametrize("extra", [[], ["zero=stage3"], ["offload=cpu"]])
def test_host_ram_at_a_quantized_load_is_one_tensor_per_rank(extra, compose_cfg):
    """transformers builds a quantized base on the meta device and loads it tensor by tensor straight onto the GPU
    (modeling_utils.py get_init_context, quantizer_bnb_4bit.py update_device_map, core_model_loading.py
    convert_and_load_state_dict_in_model: no thread pool while quantizing on the fly): per rank one tensor in host
    RAM, at most Llama 3 8B's largest, its 128,256 × 4,096 embedding, counted in fp32 as DeepSpeed's estimators count
    a load, × 8 ranks × DeepSpeed's 1.5. Not the whole 16-bit model's 4 B per parameter per rank (359 GiB here), at
    ZeRO-2 or ZeRO-3, and above the adapters' offloaded optimizer states."""
    base = ["model=llama3-8b", "cluster=1x8", "zero=stage2", "precision=bf16", *extra]
    qlora = estimate(setup_from_config(compose_cfg([*base, "peft=qlora"])))
    assert qlora.host["model_states"] == int(4 * 128_256 * 4_096 * 8 * 1.5) == 25_216_155_648
    lora = estimate(setup_from_config(compose_cfg([*base, "peft=lora"])))
    if not extra:
        assert lora.host["model_states"] == int(4 * (8_030_261_248 + 6_815_744) * 8 * 1.5)  # whole, fp32, per rank
