"""Bytes of a base model that bitsandbytes quantizes (peft=qlora; peft.load_in_8bit), as its code stores them.

Every nn.Linear of the decoder layers becomes Linear4bit/Linear8bitLt; embeddings, norms, lm_head and biases stay in
the training dtype. Per quantized weight of n elements:
- 4-bit: the packed weight, n / 2 bytes (ZeRO-3 partitions it), and its QuantState, whole on every rank: an fp32
  absmax per block of 64 and a 16-value code (double quantization: uint8 absmax plus an fp32 absmax per 256 blocks,
  a 256-value code and an offset).
- 8-bit: the int8 weight, n bytes, and an fp32 scale per output row."""
from typing import Tuple

from trl_ds.plan.params import Architecture, linear_shapes

BLOCK = 64  # bitsandbytes' default blocksize for 4-bit weights
NESTED_BLOCK = 256  # double quantization: one fp32 absmax per 256 uint8 absmax values
CODE_4BIT = 16 * 4  # the NF4/FP4 code, fp32
CODE_NESTED = 256 * 4 + 4  # the 8-bit dynamic code of the nested absmax, fp32, and the offset


def quantized_shapes(arch: Architecture) -> Tuple[Tuple[int, int], ...]:
    """(in, out) of every Linear weight bitsandbytes quantizes: each decoder layer's (dense models)."""
    return tuple(linear_shapes(arch).values()) * arch.num_hidden_layers


def quantized_elements(arch: Architecture) -> int:
    return sum(i * o for i, o in quantized_shapes(arch))


def weight_bytes(n: int, bits: int) -> int:
    """The stored weight: two 4-bit values per byte, or one int8."""
    return -(-n // 2) if bits == 4 else n


def state_bytes(n: int, out_features: int, bits: int, double_quant: bool) -> int:
    """The quantization constants of one weight (QuantState / SCB)."""
    if bits == 8:
        return 4 * out_features
    blocks = -(-n // BLOCK)
    if not double_quant:
        return 4 * blocks + CODE_4BIT
    return blocks + 4 * -(-blocks // NESTED_BLOCK) + CODE_NESTED + CODE_4BIT


def packed_elements(n: int, bits: int, storage_width: int) -> int:
    """Elements of the stored weight in its storage dtype (what ZeRO-3's persistence threshold compares)."""
    return -(-weight_bytes(n, bits) // storage_width) if bits == 4 else n


def constants_bytes(arch: Architecture, bits: int, double_quant: bool) -> int:
    return sum(state_bytes(i * o, o, bits, double_quant) for i, o in quantized_shapes(arch))
