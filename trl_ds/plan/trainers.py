"""What each TRL trainer holds beyond SFT's bill: the reference model, paired sequences, the reward head, GRPO's and
RLOO's generation, KTO's KL sequences. trl_ds/plan/memory.py adds these terms to the estimate, each its own column.

As the installed TRL runs them (docs/planner.md cites the sources):
- DPO and KTO build a reference model unless the policy is a PEFT model (its adapter disabled is the reference) or
  precompute_ref_log_probs is set; GRPO and RLOO build one when beta != 0 and the policy is no PEFT model.
  prepare_deepspeed makes it a whole copy in the policy's dtype on every rank below ZeRO-3, a ZeRO-3 partition under
  it; its no-grad forward runs inside the loss, beside the policy's saved activations.
- DPO and the reward trainer concatenate chosen and rejected: 2 × micro-batch sequences per micro-step.
- KTO forwards a KL sequence per example (unless loss_type is apo_zero_unpaired) without gradients: step time only.
- The reward model is a sequence classifier: `score` (hidden × 1) instead of the lm_head, and no vocabulary logits.
- GRPO and RLOO generate micro-batch × steps_per_generation completions per rank at once with a KV cache (under
  ZeRO-3 with ds3_gather_for_generation the whole 16-bit model gathered), then train on prompt + completion; the
  two phases are never alive together, so the estimate charges the larger.
"""
from typing import Dict, List, Tuple

from trl_ds.config.schema import PeftConfig
from trl_ds.plan.optimizer_places import PLACE

PAIRED = ("dpo", "reward")  # chosen and rejected through the model together
GENERATING = ("grpo", "rloo")  # generate completions (KV cache, ZeRO-3's whole-model gather) before training on them
PRECOMPUTABLE = ("dpo", "kto")  # take precompute_ref_log_probs: reference log-probs once, before training
KTO_NO_KL = "apo_zero_unpaired"  # KTOConfig.loss_type that estimates no KL term (kto_trainer.py calculate_kl)
REWARD_LABELS = 1  # the score's outputs: worker/trainers.py loads AutoModelForSequenceClassification(num_labels=1)
KV = 2  # a key and a value per layer and token
SAMPLING_FP32_COPIES = 2  # generate's last-position logits in fp32 and the softmax over them, per sequence


def sequences_per_sample(trainer: str) -> int:
    return 2 if trainer in PAIRED else 1


def keeps_reference(s) -> bool:
    """TRL builds a reference model: DPO, KTO, or GRPO / RLOO with beta != 0, no PEFT, no precompute."""
    return s.reference_wanted and not s.uses_lora and not s.precompute_ref


def reference_state(s) -> str:
    """How the reference log-probs are obtained, for the plan's header and plan.json."""
    if not s.reference_wanted:
        return "none (beta=0)" if s.trainer in GENERATING else "none"
    if s.uses_lora:
        return "the base model with the adapter disabled (no copy)"
    if s.precompute_ref:
        return "precomputed once before training (no copy kept)"
    return "a ZeRO-3 partition on every rank" if s.stage == 3 else "a whole copy on every rank (ZeRO disabled)"


def reference_places(s) -> Dict[str, int]:
    """Bytes per rank the reference engine holds through training, in the policy's dtype, by place (device, host,
    nvme). Under ZeRO-3 prepare_deepspeed keeps the policy's offload_param and persistence threshold, so the
    partition goes where the policy's does; the small persistent tensors stay whole on the device."""
    if not keeps_reference(s):
        return {}
    psi, w = s.counts.total, s.width
    if s.stage < 3:
        return {"device": w * psi}
    places = {"device": w * s.counts.persistent(s.persistence_threshold)}
    place = PLACE[s.param_offload]
    places[place] = places.get(place, 0) + int(w * psi / s.world)
    return places


def reference_resident(s) -> int:
    """The device's share of reference_places."""
    return reference_places(s).get("device", 0)


def reference_peak(s) -> int:
    """Resident bytes, plus under ZeRO-3 the module the reference forward gathers beside the policy's activations."""
    gathered = s.width * s.counts.largest_module if keeps_reference(s) and s.stage == 3 else 0
    return reference_resident(s) + gathered


def head_tokens(s) -> int:
    """Tokens TRL's fused LM head scores: only the valid positions on Triton devices, which for GRPO and RLOO are the
    completion's; elsewhere every position (SFT's and DPO's prompt share is unknown before the data: a bound)."""
    if s.trainer in GENERATING and s.device == "cuda":
        return s.micro_batch * s.completion_len // s.sp_size
    return s.tokens


def reward_head_peak(s) -> int:
    """The score's output (tokens × num_labels, fp32 for the loss) and the gradient into the last hidden states."""
    return s.tokens * (4 * REWARD_LABELS + s.width * s.arch.hidden_size)


def generation_sequences(s) -> int:
    """Completions one rank generates at once: TRL's generation batch over the data-parallel ranks."""
    if s.generation_batch:
        return max(s.generation_batch // s.data_parallel, 1)
    return s.micro_batch * s.accumulation


def generation_items(s) -> Dict[str, int]:
    """GRPO's and RLOO's generation-phase bytes per rank, by name (empty for other trainers)."""
    if s.trainer not in GENERATING:
        return {}
    a, seqs = s.arch, generation_sequences(s)
    kv_width = a.num_key_value_heads * a.head_dim
    items = {"kv_cache": KV * a.num_hidden_layers * kv_width * s.width * seqs * s.seq_len,
             "sampling_logits": SAMPLING_FP32_COPIES * 4 * seqs * a.vocab_size}
    if s.stage == 3 and s.ds3_gather:
        items["gathered_model"] = s.width * (s.total_params - s.persistent_params)
    return items


def reference_forwards(s) -> int:
    """Forwards without gradients per training sequence, each step: the reference's (DPO, GRPO, RLOO: one; KTO: the
    example and its KL sequence), and KTO's policy forward of the KL sequence. 0 where the reference log-probs are
    precomputed or not wanted. With PEFT the reference forward still runs, through the base with the adapter off."""
    kl = 1 if s.kl_sequence else 0
    reference = 0 if not s.reference_wanted or s.precompute_ref else 1 + kl
    return reference + kl


def generation_excess(s, training_transients: int) -> int:
    """What generation needs beyond the training phase's transients, which it never coexists with."""
    return max(sum(generation_items(s).values()) - training_transients, 0)


def describe(s) -> List[str]:
    """Header lines of the plan for a trainer other than SFT."""
    if s.trainer == "sft":
        return []
    seqs = f"{sequences_per_sample(s.trainer)} sequences per sample (chosen + rejected)" if s.trainer in PAIRED \
        else f"sequences of prompt + up to {s.completion_len} completion tokens" if s.trainer in GENERATING \
        else "1 sequence per example (unpaired prompt + completion)" + (
            ", and a KL sequence (another example's completion) forwarded without gradients" if s.kl_sequence else "")
    # the table spans every stage: say how both sides of ZeRO-3 hold a reference
    reference = "a whole copy per rank below ZeRO-3 (ZeRO disabled for it), a partition under ZeRO-3" \
        if keeps_reference(s) else reference_state(s)
    lines = [f"trainer {s.trainer}: {seqs}; reference model: {reference}"]
    if s.trainer == "reward":
        lines[0] += f"; a score head (hidden x {REWARD_LABELS}) instead of the lm_head"
    if s.trainer in GENERATING:
        gather = "the whole 16-bit model gathered on every rank (ds3_gather_for_generation)" \
            if s.ds3_gather else "parameters gathered module by module (ds3_gather_for_generation=false)"
        lines.append(f"generation: {generation_sequences(s)} completions per rank at once ({s.num_generations} per "
                     f"prompt), KV cache of {s.seq_len} tokens each" + (f"; under ZeRO-3 {gather}"))
    shrink = [f"{' '.join(overrides)} ({SHRINKS[overrides[0].split('=')[0]]})" for overrides, _ in fixes(s)]
    if s.trainer in GENERATING and s.ds3_gather and not any("ds3_gather" in text for text in shrink):
        key = "+trainer.args.ds3_gather_for_generation"
        shrink.append(f"{key}=false ({SHRINKS[key]}, under ZeRO-3)")
    return lines + ([f"settings that shrink it: {'; '.join(shrink)}"] if shrink else [])


# What each trainer setting of `fixes` removes, for the plan's header.
SHRINKS = {"peft": "no reference copy: the adapter is disabled instead",
           "+trainer.args.precompute_ref_log_probs": "reference log-probs computed once before training, none kept",
           "trainer.beta": "no reference model, no KL term",
           "+trainer.args.ds3_gather_for_generation": "no whole-model gather; slower generation"}


def fixes(s) -> List[Tuple[List[str], dict]]:
    """Trainer settings that shrink the bill: (overrides, the Setup fields they change), for a refusal to try."""
    out = []
    if keeps_reference(s):
        lora = PeftConfig()
        out.append((["peft=lora"], {"lora_r": lora.r, "lora_targets": tuple(lora.target_modules),
                                    "lora_dropout": lora.lora_dropout}))
        if s.trainer in PRECOMPUTABLE:
            out.append((["+trainer.args.precompute_ref_log_probs=true"], {"precompute_ref": True}))
        else:
            out.append((["trainer.beta=0.0"], {"reference_wanted": False}))
    if s.trainer in GENERATING and s.stage == 3 and s.ds3_gather:
        out.append((["+trainer.args.ds3_gather_for_generation=false"], {"ds3_gather": False}))
    return out
