"""The planner knows which trainer runs: DPO's and GRPO's reference model, paired sequences, the reward model's score
head, GRPO's generation. Expected values come from published parameter counts, transformers' meta-device models,
bytes per element and what TRL 1.16 does (trl/models/utils.py prepare_deepspeed, the trainers' __init__)."""
import json
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import REPO

from trl_ds.errors import ConfigError
from trl_ds.plan.memory import GiB, estimate, setup_from_config
from trl_ds.plan.planner import check_fit

pytestmark = pytest.mark.slow  # a plan per trainer and preset (whole products): make test only

PSI_8B = 8_030_261_248  # Llama-3-8B's published parameter count
L, KV_WIDTH, VOCAB, HIDDEN = 32, 8 * 128, 128_256, 4096  # its config.json: layers, kv heads x head_dim
NORMS_8B = (2 * L + 1) * HIDDEN  # two RMSNorm weights per layer and the final one: below ZeRO-3's threshold
BF16 = 2
LLAMA_8B = ["model=llama3-8b", "cluster=1x8", "trainer.max_length=2048", "trainer.per_device_train_batch_size=1"]


def planned(compose_cfg, *overrides):
    return estimate(setup_from_config(compose_cfg([*LLAMA_8B, *overrides])))


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_dpo_below_zero3_holds_a_whole_16bit_reference_on_every_rank(compose_cfg, stage):
    sft, dpo = planned(compose_cfg, f"zero=stage{stage}"), planned(compose_cfg, f"zero=stage{stage}", "trainer=dpo")
    assert dpo.device["reference"] == dpo.reference_after_step["device"] == BF16 * PSI_8B  # prepare_deepspeed: stage 0
    assert dpo.device_total - sft.device_total >= BF16 * PSI_8B
    assert sft.device["reference"] == 0 and sft.reference_after_step == {}


def test_dpo_under_zero3_partitions_the_reference_like_the_policy(compose_cfg):
    dpo = planned(compose_cfg, "zero=stage3", "trainer=dpo")
    partition = BF16 * PSI_8B // 8 + BF16 * NORMS_8B  # its shard, and the small tensors ZeRO-3 keeps whole
    assert dpo.reference_after_step["device"] == pytest.approx(partition, abs=8)
    assert dpo.after_step["params"] == dpo.reference_after_step  # the same partitioning as the policy's parameters
    gathered = BF16 * VOCAB * HIDDEN  # the largest module (embedding), gathered during the reference's forward
    assert dpo.device["reference"] == pytest.approx(partition + gathered, abs=8)
    assert dpo.device["reference"] < BF16 * PSI_8B / 4  # "about an eighth" of the copy below ZeRO-3


@pytest.mark.parametrize("extra", [["peft=lora"], ["+trainer.args.precompute_ref_log_probs=true"]])
def test_peft_and_precompute_keep_no_reference(compose_cfg, extra):
    """PEFT: the reference is the base model with the adapter disabled. precompute_ref_log_probs: TRL computes the
    reference log-probs once before training with the policy itself and keeps no reference model."""
    for stage in (2, 3):
        dpo = planned(compose_cfg, f"zero=stage{stage}", "trainer=dpo", *extra)
        assert dpo.device["reference"] == 0 and dpo.reference_after_step == {}


def test_dpo_and_reward_put_chosen_and_rejected_through_together(compose_cfg):
    """Chosen and rejected are concatenated along the batch: a micro-batch of b pairs is 2b sequences."""
    sft2 = planned(compose_cfg, "zero=stage2", "trainer.per_device_train_batch_size=2")
    for trainer in ("dpo", "reward"):
        paired = planned(compose_cfg, "zero=stage2", f"trainer={trainer}")
        assert paired.setup.tokens == 2 * 2048
        assert paired.device["activations"] == sft2.device["activations"]
    assert planned(compose_cfg, "zero=stage2", "trainer=dpo").device["logits"] == sft2.device["logits"]


def test_reward_model_count_is_a_sequence_classifier_exactly(compose_cfg):
    """AutoModelForSequenceClassification(num_labels=1), as the reward trainer loads it, built on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    for preset, raw in [("tiny", dict(vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, model_type="llama")),
                        ("qwen2.5-0.5b", None)]:
        setup = setup_from_config(compose_cfg([f"model={preset}", "trainer=reward"]))
        if raw is None:
            raw = json.loads(setup.arch.config_json) if setup.arch.config_json else None
        kind = raw.pop("model_type") if raw else setup.arch.model_type
        config = AutoConfig.for_model(kind, **(raw or dimensions(setup.arch)), num_labels=1)
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(config)
        assert setup.counts.total == sum(p.numel() for p in model.parameters()), preset
        assert setup.counts.lm_head == 0 and model.score.weight.shape == (1, setup.arch.hidden_size)


def dimensions(arch):
    return dict(vocab_size=arch.vocab_size, hidden_size=arch.hidden_size, intermediate_size=arch.intermediate_size,
                num_hidden_layers=arch.num_hidden_layers, num_attention_heads=arch.num_attention_heads,
                num_key_value_heads=arch.num_key_value_heads, tie_word_embeddings=arch.tie_word_embeddings)


def test_reward_model_of_llama3_8b_has_no_vocabulary_head(compose_cfg):
    reward = planned(compose_cfg, "zero=stage2", "trainer=reward")
    assert reward.setup.total_params == PSI_8B - VOCAB * HIDDEN + HIDDEN  # lm_head out, score (hidden x 1) in
    tokens = 2 * 2048
    assert reward.device["logits"] == tokens * (4 + BF16 * HIDDEN)  # the score's output and d(loss)/d(hidden)


def test_grpo_under_zero3_gathers_the_whole_16bit_model_for_generation(compose_cfg):
    grpo = planned(compose_cfg, "zero=stage3", "trainer=grpo", "trainer.max_completion_length=1024",
                   "trainer.num_generations=8", "batch.global_size=64", "trainer.gradient_checkpointing=true")
    items = grpo.generation_items
    assert items["gathered_model"] == BF16 * (PSI_8B - NORMS_8B)  # GatheredParameters(model.parameters())
    seqs, tokens = 64 // 8, 2048 + 1024  # the generation batch over 8 ranks; prompt + completion
    assert items["kv_cache"] == 2 * L * KV_WIDTH * BF16 * seqs * tokens
    assert grpo.setup.seq_len == tokens and grpo.setup.tokens == tokens
    transients = grpo.device["activations"] + grpo.device["logits"]
    assert grpo.device["generation"] == sum(items.values()) - transients > BF16 * PSI_8B * 0.5
    no_gather = planned(compose_cfg, "zero=stage3", "trainer=grpo", "+trainer.args.ds3_gather_for_generation=false")
    assert "gathered_model" not in no_gather.generation_items
    assert "gathered_model" not in planned(compose_cfg, "zero=stage2", "trainer=grpo").generation_items


def test_grpo_keeps_a_reference_only_with_beta(compose_cfg):
    assert planned(compose_cfg, "zero=stage2", "trainer=grpo").device["reference"] == 0  # the preset's beta 0.0
    assert planned(compose_cfg, "zero=stage2", "trainer=grpo", "trainer.beta=0.04").device["reference"] == \
        BF16 * PSI_8B
    assert planned(compose_cfg, "zero=stage2", "trainer=grpo", "trainer.beta=0.04", "peft=lora"
                   ).device["reference"] == 0


def test_preflight_refuses_dpo_that_fits_as_sft_and_names_a_fix_that_works(compose_cfg):
    args = ["zero=stage2", "trainer.gradient_checkpointing=true", "cluster.gpu_memory_gb=60"]
    assert planned(compose_cfg, *args).verdict == "fits"
    cfg = compose_cfg([*LLAMA_8B, *args, "trainer=dpo"])
    dpo = estimate(setup_from_config(cfg))
    assert dpo.verdict == "does not fit"
    holds = r"trainer=dpo holds: the reference model 15\.0 GiB, activations and logits for 2 sequences per sample"
    with pytest.raises(ConfigError, match=holds) as err:
        check_fit(cfg, dpo, launching=True)
    message = err.value.render()
    assert "Fits with peft=lora" in message
    fixed = compose_cfg([*LLAMA_8B, *args, "trainer=dpo", "peft=lora"])
    assert check_fit(fixed, estimate(setup_from_config(fixed)), launching=True) is None


def test_grpo_refusal_offers_the_gather_switch(compose_cfg):
    args = ["zero=stage3", "trainer=grpo", "trainer.gradient_checkpointing=true", "trainer.max_completion_length=256",
            "batch.global_size=8"]
    gather = planned(compose_cfg, *args)
    limit = (gather.device_total - gather.device["generation"] // 2) / GiB
    cfg = compose_cfg([*LLAMA_8B, *args, f"cluster.gpu_memory_gb={limit:.1f}"])
    with pytest.raises(ConfigError, match=r"Fits with \+trainer\.args\.ds3_gather_for_generation=false"):
        check_fit(cfg, estimate(setup_from_config(cfg)), launching=True)
    fixed = compose_cfg([*LLAMA_8B, *args, f"cluster.gpu_memory_gb={limit:.1f}",
                         "+trainer.args.ds3_gather_for_generation=false"])
    assert estimate(setup_from_config(fixed)).verdict == "fits"


def test_plan_shows_the_trainer_columns_and_json_names_them():
    dpo = subprocess.run([sys.executable, "-m", "trl_ds.plan", *LLAMA_8B, "trainer=dpo"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert dpo.returncode == 0, dpo.stderr
    lines = dpo.stdout.splitlines()
    assert "trainer dpo: 2 sequences per sample (chosen + rejected); reference model: a whole copy per rank below " \
           "ZeRO-3 (ZeRO disabled for it), a partition under ZeRO-3" in lines
    assert any(line.startswith("settings that shrink it: peft=lora (no reference copy") for line in lines)
    head = next(line for line in lines if line.startswith("zero"))
    assert "reference" in head.split() and "generation" not in head.split()
    # trainer.max_length is not GRPO's (the launch refuses it, so the plan does too)
    grpo = [o for o in LLAMA_8B if not o.startswith("trainer.max_length=")]
    data = json.loads(subprocess.run([sys.executable, "-m", "trl_ds.plan", *grpo, "trainer=grpo", "--json"],
                                     cwd=REPO, capture_output=True, text=True, timeout=60).stdout)
    assert data["trainer"]["name"] == "grpo" and data["trainer"]["generation"]["ds3_gather_for_generation"] is True
    for row in data["rows"]:
        assert {"reference", "generation"} <= set(row["device_bytes"]) and "generation_items" in row


def test_sft_plan_is_unchanged_by_the_trainer_terms(compose_cfg):
    sft = planned(compose_cfg, "zero=stage3")
    assert sft.device["reference"] == sft.device["generation"] == 0 and sft.generation_items == {}
    assert replace(sft.setup, trainer="sft").tokens == 2048


def test_step_time_counts_the_reference_forward_and_grpo_generation(compose_cfg):
    from trl_ds.plan.steptime import hardware_from_config, step_time

    cfg = compose_cfg([*LLAMA_8B, "zero=stage2", "trainer=dpo"])
    hw, dpo = hardware_from_config(cfg), setup_from_config(cfg)
    terms = step_time(dpo, hw).terms
    # a forward is 2 of the 6 FLOPs per parameter and token, and 4 of the 12 of attention: a third of training's
    assert terms["reference"] == pytest.approx(terms["compute"] / 3)
    assert step_time(replace(dpo, precompute_ref=True), hw).terms["reference"] == 0
    assert step_time(replace(dpo, trainer="sft", reference_wanted=False), hw).terms["reference"] == 0
    grpo_cfg = compose_cfg([*LLAMA_8B, "zero=stage3", "trainer=grpo", "trainer.max_completion_length=256"])
    grpo = setup_from_config(grpo_cfg)
    gather, no_gather = (step_time(replace(grpo, ds3_gather=g), hw).terms["generation"] for g in (True, False))
    decode_floor = 256 * BF16 * PSI_8B / (hw.hbm_gbps * 1e9)  # every decode step reads the 16-bit model
    assert decode_floor < gather < no_gather
    assert step_time(grpo, hw).terms["reference"] == 0  # beta 0.0: no reference forward


@pytest.mark.parametrize("width,dtype_name", [(2, "bf16"), (4, "fp32")])
def test_paired_activations_are_what_autograd_saves_for_2b_sequences(width, dtype_name):
    """scripts/study/measure_activations.py --paired: the decoder layers of DPO's policy and of the reward model (a
    real AutoModelForSequenceClassification) save, for b pairs, what the planner charges for 2b sequences."""
    from scripts.study import measure_activations
    from trl_ds.plan.memory import Setup, activations
    from trl_ds.plan.params import count_params, from_config

    measured = measure_activations.measure_paired(measure_activations.DTYPES[dtype_name])
    h, f, a, kv, d = measured["shape"]
    arch = from_config(dict(model_type="llama", vocab_size=measure_activations.VOCAB, hidden_size=h,
                            intermediate_size=f, num_hidden_layers=2, num_attention_heads=a, num_key_value_heads=kv,
                            head_dim=d), "measure_activations")
    s = Setup(arch=arch, counts=count_params(arch), stage=2, optimizer_offload="none", param_offload="none", nodes=1,
              gpus_per_node=1, device="cpu", dtype=dtype_name, micro_batch=1, seq_len=measured["seq"],
              gradient_checkpointing=False, gpu_memory_gb=0, cpu_memory_gb=1)
    assert measured["sft"] == activations(s)
    for trainer in ("dpo", "reward"):
        assert measured[trainer] == activations(replace(s, trainer=trainer)) == 2 * measured["sft"]


def test_the_docs_table_of_llama3_8b_per_trainer(compose_cfg):
    """docs/planner.md's table (GiB per rank, 1x8, 2048 tokens, micro 1, checkpointing): pinned so it cannot drift."""
    table = {"trainer=sft": (45.4, 30.3), "trainer=dpo": (64.1, 34.3), "trainer=dpo peft=lora": (23.6, 9.5),
             "trainer=dpo +trainer.args.precompute_ref_log_probs=true": (45.4, 30.7), "trainer=reward": (42.6, 28.6),
             "trainer=kto trainer.per_device_train_batch_size=2": (64.1, 34.3),
             "trainer=rloo trainer.max_completion_length=256": (64.1, 48.0)}
    for row, totals in table.items():
        for stage, total in zip((2, 3), totals):
            e = planned(compose_cfg, f"zero=stage{stage}", "trainer.gradient_checkpointing=true", *row.split())
            assert f"{e.device_total / GiB:.1f}" == f"{total:.1f}", (row, stage)


def test_auto_fit_counts_the_trainer(compose_cfg):
    """zero=auto: where ZeRO-2 fits SFT, DPO's reference copy pushes the choice to ZeRO-3, which partitions it."""
    from trl_ds.plan.autofit import resolve

    args = [*LLAMA_8B, "zero=auto", "trainer.gradient_checkpointing=true", "cluster.gpu_memory_gb=60"]
    assert resolve(compose_cfg([*args, "trainer=sft"]))["winner"]["zero_stage"] in (1, 2)
    dpo = resolve(compose_cfg([*args, "trainer=dpo"]))
    assert dpo["winner"]["zero_stage"] == 3
    assert all(row["zero_stage"] == 3 for row in dpo["ranking"] if row["verdict"] == "fits")


def test_auto_fit_names_the_trainer_setting_when_nothing_fits(compose_cfg):
    from trl_ds.plan.autofit import resolve

    cfg = compose_cfg([*LLAMA_8B, "zero=auto", "offload=auto", "trainer.gradient_checkpointing=true", "trainer=dpo",
                       "cluster.gpu_memory_gb=10"])
    with pytest.raises(ConfigError, match=r"With peft=lora, zero=stage\d offload=\S+ fits\."):
        resolve(cfg)


def test_grpo_head_scores_only_completion_tokens_on_gpus(compose_cfg):
    """TRL's fused head: "On Triton devices, only the valid positions are scored"; GRPO masks the prompt (-100)."""
    from trl_ds.plan.memory import fused_head_peak

    grpo = planned(compose_cfg, "zero=stage2", "trainer=grpo", "trainer.max_completion_length=256")
    assert grpo.device["logits"] == fused_head_peak(256, VOCAB, HIDDEN, BF16, on_cpu=False)
    on_cpu = setup_from_config(compose_cfg(["trainer=grpo"]))
    assert estimate(on_cpu).device["logits"] == fused_head_peak(on_cpu.tokens, on_cpu.arch.vocab_size,
                                                                on_cpu.arch.hidden_size, 4, on_cpu=True)


def test_zero3_reference_partition_follows_offload_param(compose_cfg):
    """prepare_deepspeed drops offload_optimizer but keeps offload_param: the reference's partition goes to the host."""
    on_gpu = planned(compose_cfg, "zero=stage3", "trainer=dpo")
    offloaded = planned(compose_cfg, "zero=stage3", "trainer=dpo", "offload=cpu", "offload.param=cpu")
    partition = BF16 * PSI_8B // 8
    assert offloaded.reference_after_step["host"] == pytest.approx(partition, abs=8)
    assert offloaded.reference_after_step["device"] == BF16 * NORMS_8B
    assert on_gpu.device["reference"] - offloaded.device["reference"] == pytest.approx(partition, abs=8)
    sft = planned(compose_cfg, "zero=stage3", "offload=cpu", "offload.param=cpu")
    assert offloaded.host["model_states"] - sft.host["model_states"] == pytest.approx(1.5 * 8 * partition, rel=1e-6)


@pytest.mark.parametrize("override", ["+trainer.args.steps_per_generation=four",
                                      "+trainer.args.generation_batch_size=0", "+trainer.args.steps_per_generation=-2"])
def test_grpo_generation_counts_that_are_not_positive_integers_are_one_message(override, capsys):
    from trl_ds.cli import plan as plan_command

    assert plan_command.main(["trainer=grpo", override]) == 2
    key, given = override[len("+trainer.args."):].split("=")
    assert capsys.readouterr().err == (f"trl-ds plan: trainer.args.{key}={given} must be a positive integer "
                                       f"(GRPOConfig.{key}). Set e.g. trainer.args.{key}=4, or leave it out for TRL "
                                       f"to derive it.\n")


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_kto_below_zero3_holds_a_whole_16bit_reference_like_dpo(compose_cfg, stage):
    """KTOTrainer builds its reference as DPOTrainer does and hands it to the same prepare_deepspeed (stage 0)."""
    kto = planned(compose_cfg, f"zero=stage{stage}", "trainer=kto", "trainer.per_device_train_batch_size=2")
    assert kto.device["reference"] == kto.reference_after_step["device"] == BF16 * PSI_8B


def test_kto_under_zero3_partitions_the_reference_and_gathers_its_largest_module(compose_cfg):
    kto = planned(compose_cfg, "zero=stage3", "trainer=kto", "trainer.per_device_train_batch_size=2")
    partition = BF16 * PSI_8B // 8 + BF16 * NORMS_8B
    assert kto.reference_after_step["device"] == pytest.approx(partition, abs=8)
    assert kto.device["reference"] == pytest.approx(partition + BF16 * VOCAB * HIDDEN, abs=8)


@pytest.mark.parametrize("extra", [["peft=lora"], ["+trainer.args.precompute_ref_log_probs=true"]])
def test_kto_with_peft_or_precomputed_log_probs_keeps_no_reference(compose_cfg, extra):
    """kto_trainer.py: `if is_peft_model(self.model) or (args.precompute_ref_log_probs and not self.is_fsdp_enabled)`:
    self.ref_model = None."""
    for stage in (2, 3):
        kto = planned(compose_cfg, f"zero=stage{stage}", "trainer=kto", "trainer.per_device_train_batch_size=2", *extra)
        assert kto.device["reference"] == 0 and kto.reference_after_step == {}


def test_kto_trains_one_sequence_per_example_its_kl_sequence_has_no_gradients(compose_cfg):
    """Unpaired: b examples are b sequences with gradients (activations and logits as SFT's at micro b); the KL
    sequences go through the policy under torch.no_grad (_compute_kl_logps) and save nothing for backward."""
    sft = planned(compose_cfg, "zero=stage2", "trainer.per_device_train_batch_size=2")
    kto = planned(compose_cfg, "zero=stage2", "trainer=kto", "trainer.per_device_train_batch_size=2")
    assert kto.setup.tokens == 2 * 2048
    assert (kto.device["activations"], kto.device["logits"]) == (sft.device["activations"], sft.device["logits"])
    extra = {k: kto.device[k] - sft.device[k] for k in kto.device if k != "overhead"}  # overhead: a margin on the rest
    assert extra == {**{k: 0 for k in extra}, "reference": BF16 * PSI_8B}  # the reference copy, nothing else
    assert kto.device["generation"] == 0 and kto.generation_items == {}


def test_kto_step_time_counts_the_reference_and_the_kl_forwards(compose_cfg):
    """A forward is a third of training's FLOPs (2 of 6 per parameter and token, 4 of 12 of attention). Per example
    KTO forwards without gradients: the KL sequence through the policy, the example and the KL sequence through the
    reference: three forwards, the whole compute term. Without a KL term (apo_zero_unpaired) only the reference's
    forward of the example is left; with precompute only the policy's KL forward."""
    from trl_ds.plan.steptime import hardware_from_config, step_time

    def terms(*extra):
        cfg = compose_cfg([*LLAMA_8B, "zero=stage2", "trainer=kto", "trainer.per_device_train_batch_size=2", *extra])
        return step_time(setup_from_config(cfg), hardware_from_config(cfg)).terms

    kto = terms()
    assert kto["reference"] == pytest.approx(kto["compute"])
    for extra in (["+trainer.args.loss_type=apo_zero_unpaired"], ["+trainer.args.precompute_ref_log_probs=true"]):
        assert terms(*extra)["reference"] == pytest.approx(kto["compute"] / 3)


def test_rloo_under_zero3_gathers_the_whole_16bit_model_for_generation_like_grpo(compose_cfg):
    """rloo_trainer.py generates through unwrap_model_for_generation(gather_deepspeed3_params=ds3_gather_for_generation)
    with RLOOConfig's generation batch: the bill is GRPO's."""
    rloo = planned(compose_cfg, "zero=stage3", "trainer=rloo", "trainer.max_completion_length=1024",
                   "trainer.num_generations=8", "batch.global_size=64", "trainer.gradient_checkpointing=true")
    items = rloo.generation_items
    assert items["gathered_model"] == BF16 * (PSI_8B - NORMS_8B)
    seqs, tokens = 64 // 8, 2048 + 1024
    assert items["kv_cache"] == 2 * L * KV_WIDTH * BF16 * seqs * tokens
    assert rloo.setup.seq_len == rloo.setup.tokens == tokens
    assert rloo.device["generation"] == sum(items.values()) - rloo.device["activations"] - rloo.device["logits"]
    no_gather = planned(compose_cfg, "zero=stage3", "trainer=rloo", "+trainer.args.ds3_gather_for_generation=false")
    assert "gathered_model" not in no_gather.generation_items


def test_rloo_keeps_a_reference_for_its_kl_penalty_unless_beta_is_0_or_peft(compose_cfg):
    """RLOOConfig's beta defaults to 0.05 (the preset's): the KL penalty needs the reference's log-probs."""
    assert planned(compose_cfg, "zero=stage2", "trainer=rloo").device["reference"] == BF16 * PSI_8B
    assert planned(compose_cfg, "zero=stage2", "trainer=rloo", "trainer.beta=0.0").device["reference"] == 0
    assert planned(compose_cfg, "zero=stage2", "trainer=rloo", "peft=lora").device["reference"] == 0
    partition = BF16 * PSI_8B // 8 + BF16 * NORMS_8B
    rloo3 = planned(compose_cfg, "zero=stage3", "trainer=rloo")
    assert rloo3.reference_after_step["device"] == pytest.approx(partition, abs=8)


def test_plan_shows_kto_and_rloo_columns_and_json_names_them():
    def plan(*args):
        out = subprocess.run([sys.executable, "-m", "trl_ds.plan", *args], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    lines = plan(*LLAMA_8B, "trainer=kto", "trainer.per_device_train_batch_size=2").splitlines()
    assert "trainer kto: 1 sequence per example (unpaired prompt + completion), and a KL sequence (another example's " \
           "completion) forwarded without gradients; reference model: a whole copy per rank below ZeRO-3 (ZeRO " \
           "disabled for it), a partition under ZeRO-3" in lines
    head = next(line for line in lines if line.startswith("zero")).split()
    assert "reference" in head and "generation" not in head
    assert any("+trainer.args.precompute_ref_log_probs=true" in line for line in lines if line.startswith("settings"))
    prompt = [o for o in LLAMA_8B if not o.startswith("trainer.max_length=")]  # max_length is not RLOO's
    lines = plan(*prompt, "trainer=rloo").splitlines()
    head = next(line for line in lines if line.startswith("zero")).split()
    assert {"reference", "generation"} <= set(head)
    assert any(line.startswith("generation: ") for line in lines)
    data = json.loads(plan(*prompt, "trainer=rloo", "--json"))
    assert data["trainer"]["reference_parameters"] == PSI_8B
    assert data["trainer"]["generation"]["ds3_gather_for_generation"] is True
    assert all({"reference", "generation"} <= set(row["device_bytes"]) for row in data["rows"])
