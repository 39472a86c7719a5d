"""A bitsandbytes base under LoRA (peft=qlora, peft.load_in_8bit), checked before launch against what the installed
transformers, bitsandbytes, PEFT and DeepSpeed do with it (docs/qlora.md gives each rule's source)."""
import importlib.util
from typing import List

from trl_ds.config.quantization import (
    INSTALL,
    TORCH_NAMES,
    quant_storage,
    quantized_bits,
    training_dtype_name,
)
from trl_ds.config.values import value
from trl_ds.plan.params import architecture, linear_shapes

STORAGE_DTYPES = ("float32", "bfloat16", "float16", "uint8")  # bitsandbytes packs 4-bit pairs into any of them
CPU_IN_BLOCK, CPU_OUT_BLOCK = 64, 32  # bitsandbytes' blocksize and CPU block_n
FOUR_BIT_OPTIONS = {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": False,
                    "bnb_4bit_compute_dtype": None, "bnb_4bit_quant_storage": None}  # their defaults


def check_quantization(cfg) -> List[str]:
    p, bits, name = cfg.peft, quantized_bits(cfg), value(cfg.peft.name)
    if p.load_in_4bit and p.load_in_8bit:
        return ["peft.load_in_4bit=true and peft.load_in_8bit=true: bitsandbytes loads a base in one of them. "
                "Use peft=qlora (4 bits), or peft=lora peft.load_in_8bit=true."]
    if name == "qlora" and bits != 4:
        return ["peft=qlora loads the base in 4 bits, and peft.load_in_4bit=false here. Use peft=qlora alone, or "
                "peft=lora (peft.load_in_8bit=true for an 8-bit base)."]
    problems = _unused_four_bit_options(cfg) if bits != 4 else []
    if not bits:
        return problems
    if name == "none":
        problems.append(f"peft.load_in_{bits}bit=true with peft=none: bitsandbytes' quantized weights take no "
                        f"gradients, so only adapters can train over them. Use peft=qlora (or peft=lora).")
    if architecture(cfg.model).is_moe:
        problems.append(f"peft.load_in_{bits}bit=true with the mixture-of-experts model={cfg.model.name}: "
                        f"transformers keeps its experts as fused 3-D tensors, which bitsandbytes does not quantize "
                        f"(only nn.Linear), and trl_ds plans dense models only. Use a dense model, or peft=lora.")
    if value(cfg.offload.param) != "none":
        problems.append(f"offload.param={value(cfg.offload.param)} with peft.load_in_{bits}bit=true: transformers "
                        f"loads the quantized model whole onto every GPU before DeepSpeed partitions it, and PEFT's "
                        f"DeepSpeed guide reports ZeRO-3 QLoRA with CPU offload using more GPU memory than without "
                        f"(Caveats), which trl_ds cannot plan. Use offload.param=none (offload=cpu offloads the "
                        f"adapters' optimizer).")
    return problems + (_four_bit_dtypes(cfg) + _cpu_packing(cfg) if bits == 4 else [])


def _unused_four_bit_options(cfg) -> List[str]:
    changed = [k for k, default in FOUR_BIT_OPTIONS.items() if value(cfg.peft[k]) != default]
    return [f"peft.{k}={_show(value(cfg.peft[k]))} shapes a 4-bit base, and peft.load_in_4bit=false here: nothing "
            f"would read it. Use peft=qlora, or remove it." for k in changed]


def _four_bit_dtypes(cfg) -> List[str]:
    problems, training = [], training_dtype_name(cfg)
    given = cfg.peft.bnb_4bit_compute_dtype
    if given is not None and given != training:
        problems.append(f"peft.bnb_4bit_compute_dtype={given} differs from the training dtype {training} "
                        f"(precision): TRL's ModelConfig has one dtype for both, and the adapters and activations "
                        f"run in the training dtype. Leave it unset, or set precision={_precision(given)}.")
    storage = quant_storage(cfg)
    if storage not in STORAGE_DTYPES:
        problems.append(f"peft.bnb_4bit_quant_storage={storage} is not a storage dtype bitsandbytes packs into. Use "
                        f"one of {', '.join(STORAGE_DTYPES)} (unset: the training dtype).")
    elif cfg.zero.stage == 3 and storage != training and _fetches_by_all_reduce(cfg.zero):
        problems.append(f"zero.stage3_use_all_reduce_for_fetch_params=true with peft.bnb_4bit_quant_storage="
                        f"{storage}: DeepSpeed then fetches a module's parameters into one flat buffer of one dtype "
                        f"(partition_parameters.py _all_gather_coalesced: get_only_unique_item raises on the packed "
                        f"{storage} weights beside {training} parameters). Leave peft.bnb_4bit_quant_storage unset "
                        f"(the training dtype), or drop that option.")
    return problems


def _fetches_by_all_reduce(zero) -> bool:
    return bool(zero.get("stage3_use_all_reduce_for_fetch_params") or zero.get("use_all_reduce_for_fetch_params"))


def _cpu_packing(cfg) -> List[str]:
    """bitsandbytes' CPU forward without gradients in eval mode (evaluation) repacks each 4-bit weight
    (functional.py _convert_weight_packed_for_cpu, on CPUs with AVX512-BF16): out_features in blocks of 32 rows,
    in_features in whole quantization blocks of 64. trl_ds's final probe runs unpacked (worker/train.py)."""
    if value(cfg.cluster.device) != "cpu" or value(cfg.trainer.eval_strategy) == "no":
        return []
    odd = {name: shape for name, shape in linear_shapes(architecture(cfg.model)).items()
           if shape[0] % CPU_IN_BLOCK or shape[1] % CPU_OUT_BLOCK}
    if not odd:
        return []
    sizes = ", ".join(f"{name} {shape[0]}→{shape[1]}" for name, shape in odd.items())
    return [f"peft=qlora on CPU ranks with evaluation: bitsandbytes' CPU forward without gradients repacks each "
            f"4-bit Linear and needs in_features a multiple of {CPU_IN_BLOCK} and out_features of {CPU_OUT_BLOCK} "
            f"(_convert_weight_packed_for_cpu); model={cfg.model.name} has {sizes}. Use dimensions that are (e.g. "
            f"model.intermediate_size={_round_up(cfg.model.intermediate_size)}), or a GPU cluster, or "
            f"trainer.eval_strategy=no."]


def _round_up(n: int) -> int:
    return -(-n // CPU_IN_BLOCK) * CPU_IN_BLOCK


def check_bitsandbytes_here(cfg) -> List[str]:
    """A real launch of a quantized base needs bitsandbytes on this machine (the ranks import it to load)."""
    bits = quantized_bits(cfg)
    if not bits or importlib.util.find_spec("bitsandbytes") is not None:
        return []
    return [f"peft.load_in_{bits}bit=true needs bitsandbytes, which is not installed here. Install it: {INSTALL}."]


def _precision(torch_name: str) -> str:
    return next((k for k, v in TORCH_NAMES.items() if v == torch_name), "fp32")


def _show(x) -> str:
    return str(x).lower() if isinstance(x, bool) else str(x)
