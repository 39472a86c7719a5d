"""The planner under peft=lora (frozen and trainable parameters apart) and sp=ulysses (tokens per rank divided)."""
import json
from dataclasses import replace

import pytest

from trl_ds.cli import plan
from trl_ds.plan import memory as est
from trl_ds.plan import moments
from trl_ds.plan.memory import estimate, setup_from_config
from trl_ds.plan.params import count_lora
from trl_ds.plan.steptime import Hardware, collectives, compute_seconds, optimizer_seconds, step_time

LORA_8B = ["model=llama3-8b", "zero=stage3", "cluster=1x8", "peft=lora"]
HW = Hardware(peak_tflops=100, efficiency=0.5, hbm_gbps=1000, pcie_gbps=20, intra_node_gbps=200, inter_node_gbps=20,
              collective_latency_us=0, comm_overlap=0, nvme_read_gbps=5, nvme_write_gbps=2,
              cpu_adam_mparams_per_s=1000, micro_step_overhead_ms=0, zero2_ns_per_param=0,
              zero3_ns_per_param=0)


@pytest.fixture
def lora_8b(compose_cfg):
    return setup_from_config(compose_cfg(LORA_8B))


def test_lora_setup_reads_peft(lora_8b):
    # per layer r × (in + out): q and o 4096 + 4096, k and v 4096 + 1024
    adapters = count_lora(lora_8b.arch, 8, ["q_proj", "k_proj", "v_proj", "o_proj"])  # conf/peft/lora.yaml
    assert (lora_8b.lora_r, lora_8b.lora_targets, lora_8b.lora_dropout) == (8, ("q_proj", "k_proj", "v_proj",
                                                                                "o_proj"), 0.05)
    assert lora_8b.trainable == adapters.total == 32 * 8 * (4096 * 2 + 5120 + 5120 + 4096 * 2)
    assert lora_8b.total_params == 8_030_261_248 + adapters.total
    assert lora_8b.largest_trainable == 4096 * 8


def test_zero3_lora_optimizer_and_gradients_count_trainable_params_only(lora_8b):
    e, psi, psi_t = estimate(lora_8b), lora_8b.total_params, lora_8b.trainable
    assert e.device["optimizer"] == 12 * psi_t / 8  # exact: 12 × 6,815,744 is a multiple of 8
    assert e.device["params"] == 2 * lora_8b.counts.largest_module + int(2 * psi / 8)
    # the gathered adapter's gradient; the fp32 gradients exist at the step only, smaller than the backward's peak
    assert e.device["gradients"] == 2 * 4096 * 8
    assert moments.step_transient(lora_8b) == 6 * psi_t // 8 < e.device["activations"]
    assert e.buffer_items["grad_partition_16bit"] == int(2 * psi_t / 8)
    assert e.buffer_items["reduce_bucket"] == 2 * psi_t  # the whole bucket would be larger than Ψ_t
    assert e.after_step["optimizer"] == {"device": 12 * psi_t // 8}
    assert e.after_step["gradients"] == {"device": 2 * psi_t // 8}
    # every adapter tensor of this config (r × 4096, r × 1024) is below the persistence threshold: kept whole
    assert e.after_step["params"] == {"device": int(2 * psi / 8) + 2 * (lora_8b.counts.persistent(100_000) + psi_t)}


def test_lora_replicates_frozen_params_below_zero3(lora_8b):
    s = replace(lora_8b, stage=2)
    states, off_device = est.model_states(s)
    assert states == {"params": 2 * s.total_params, "gradients": int(2 * s.trainable / 8),
                      "optimizer": int(12 * s.trainable / 8)}
    assert off_device == 0
    assert est.model_states(replace(s, optimizer_offload="cpu"))[1] == int(16 * s.trainable / 8)


def test_offload_moves_all_params_and_trainable_optimizer_state(lora_8b):
    s = replace(lora_8b, optimizer_offload="nvme", param_offload="nvme")
    assert estimate(s).nvme == int(2 * s.total_params + 12 * s.trainable)
    cpu = replace(lora_8b, optimizer_offload="cpu", param_offload="cpu")
    assert est.model_states(cpu)[1] == int(16 * cpu.trainable / 8) + int(2 * cpu.total_params / 8)


def test_frozen_lm_head_has_no_fp32_weight_gradient(lora_8b, compose_cfg):
    full = setup_from_config(compose_cfg(LORA_8B[:-1]))
    assert est.logits(full) - est.logits(lora_8b) == 4 * 128_256 * 4096


def test_peft_none_keeps_todays_estimate(compose_cfg):
    s = setup_from_config(compose_cfg(LORA_8B[:-1]))
    assert (s.lora_r, s.sp_size, s.trainable, s.total_params) == (0, 1, s.counts.total, s.counts.total)


@pytest.mark.parametrize("peft", ["peft=none", "peft=lora"])
@pytest.mark.parametrize("checkpointing", ["false", "true"])
def test_ulysses_halves_the_sequence_terms_exactly(compose_cfg, peft, checkpointing):
    base = ["model=llama3-8b", "zero=stage3", "cluster=1x8", "trainer.max_length=4096", peft,
            f"trainer.gradient_checkpointing={checkpointing}"]
    alone, split = (estimate(setup_from_config(compose_cfg(base + extra))) for extra in ([], ["sp=ulysses"]))
    assert split.setup.sp_size == 2 and split.setup.tokens == alone.setup.tokens // 2
    assert 2 * split.device["activations"] == alone.device["activations"]
    assert split.device["logits"] == est.fused_head_peak(2 * 2048, 128_256, 4096, 2, on_cpu=False,
                                                         frozen=peft == "peft=lora")
    for kind in ("params", "gradients", "optimizer"):  # ZeRO still partitions over all 8 ranks
        assert split.device[kind] == alone.device[kind]


def test_planner_prints_the_trainable_count(capsys):
    assert plan.main(["model=llama3-8b", "cluster=1x8", "peft=lora"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("trl_ds plan: llama3-8b (8.04B parameters, 6.82M trainable, largest module 525.34M), LoRA r=8, "
                     "bf16, sequence 64 tokens")


def test_planner_json_and_ulysses_header(capsys):
    assert plan.main(["model=llama3-8b", "cluster=1x8", "sp=ulysses", "trainer.max_length=2048", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["parameters"], data["trainable_parameters"], data["lora_r"], data["sp_size"]) == (
        8_030_261_248, 8_030_261_248, 0, 2)
    assert plan.main(["model=llama3-8b", "cluster=1x8", "sp=ulysses", "trainer.max_length=2048"]) == 0
    assert "sequence 2048 tokens, 1024 per rank (Ulysses over 2 ranks)" in capsys.readouterr().out.splitlines()[0]


def test_steptime_trains_only_the_adapters(lora_8b):
    s, a = replace(lora_8b, seq_len=2048), lora_8b.arch
    matmul = s.total_params - s.counts.embedding
    per_token = 4 * matmul + 2 * s.trainable + 12 * a.num_hidden_layers * 2048 * a.num_attention_heads * a.head_dim
    assert compute_seconds(s, HW, 1) == pytest.approx(s.micro_batch * 2048 * per_token / 50e12, rel=1e-12)
    assert optimizer_seconds(s, HW) == pytest.approx(28 * s.trainable / 8 / 1000e9)
    ring = 7 / 8
    assert collectives(s, 1)[0] == pytest.approx(ring * (2 * 2 * s.total_params + 2 * s.trainable))  # ZeRO-3
    assert collectives(replace(s, stage=2), 1)[0] == pytest.approx(3 * ring * 2 * s.trainable)


def test_steptime_ulysses_ranks_share_samples(lora_8b):
    s = replace(lora_8b, sp_size=2)
    assert compute_seconds(s, HW, 1) == pytest.approx(compute_seconds(lora_8b, HW, 1) / 2)
    assert step_time(s, HW, 4).samples == lora_8b.micro_batch * 4 * 4  # 8 ranks, 4 data-parallel
