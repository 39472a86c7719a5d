"""trl_ds/plan/steptime.py: each term against its formula, the hardware presets and their overrides."""
import os
from dataclasses import replace

import pytest

from trl_ds.errors import ConfigError
from trl_ds.plan.memory import setup_from_config
from trl_ds.plan.steptime import (
    HARDWARE_DIR,
    Hardware,
    collectives,
    compute_seconds,
    hardware_from_config,
    offload_seconds,
    optimizer_seconds,
    step_time,
    zero_seconds,
)

HW = Hardware(peak_tflops=100, efficiency=0.5, hbm_gbps=1000, pcie_gbps=20, intra_node_gbps=200, inter_node_gbps=20,
              collective_latency_us=0, comm_overlap=0, nvme_read_gbps=5, nvme_write_gbps=2,
              cpu_adam_mparams_per_s=1000, micro_step_overhead_ms=0, zero2_ns_per_param=0,
              zero3_ns_per_param=0)
GPUS = ("a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l4-24gb", "rtx4090-24gb", "cpu")


@pytest.fixture
def setup_8b(compose_cfg):
    return setup_from_config(compose_cfg(["model=llama3-8b", "cluster=1x8", "trainer.max_length=2048"]))


def test_compute_is_six_flops_per_matmul_parameter_plus_attention(setup_8b):
    s, a = setup_8b, setup_8b.arch
    matmul = s.counts.total - s.counts.embedding  # untied: the input embedding is a lookup
    per_token = 6 * matmul + 12 * a.num_hidden_layers * 2048 * a.num_attention_heads * a.head_dim
    tokens = s.micro_batch * 2048 * 3
    assert compute_seconds(s, HW, 3) == pytest.approx(tokens * per_token / (100e12 * 0.5), rel=1e-12)


def test_checkpointing_adds_one_forward(setup_8b):
    plain = compute_seconds(setup_8b, HW, 1)
    assert compute_seconds(replace(setup_8b, gradient_checkpointing=True), HW, 1) == pytest.approx(plain * 4 / 3)


def test_zero_volumes_follow_the_paper_and_deepspeed(setup_8b):
    ring_psi = 7 / 8 * setup_8b.counts.total * 2
    volume = {stage: collectives(replace(setup_8b, stage=stage), 1)[0] for stage in range(4)}
    # stages 1-2: DeepSpeed all-reduces the gradient buckets (2Ψ), then all-gathers the parameters (Ψ)
    assert volume == pytest.approx({0: 2 * ring_psi, 1: 3 * ring_psi, 2: 3 * ring_psi, 3: 3 * ring_psi})
    # with accumulation: stages 0-1 reduce once per step, stage 2 every micro-step, stage 3 everything per micro-step
    assert collectives(replace(setup_8b, stage=1), 4)[0] == pytest.approx(3 * ring_psi)
    assert collectives(replace(setup_8b, stage=2), 4)[0] == pytest.approx(9 * ring_psi)
    assert collectives(replace(setup_8b, stage=3), 4)[0] == pytest.approx(12 * ring_psi)
    assert collectives(replace(setup_8b, gpus_per_node=1), 4) == (0.0, 0, 0.0)


def test_inter_node_bandwidth_and_overlap(setup_8b):
    one_node = step_time(replace(setup_8b, stage=3), HW).terms["communication"]
    two_nodes = step_time(replace(setup_8b, stage=3, nodes=2, gpus_per_node=4), HW).terms["communication"]
    assert two_nodes == pytest.approx(one_node * 10)  # 200 GB/s NVLink vs 20 GB/s network
    overlapped = step_time(replace(setup_8b, stage=3), replace(HW, comm_overlap=0.5)).terms["communication"]
    assert overlapped == pytest.approx(one_node / 2)


def test_optimizer_on_device_or_cpu(setup_8b):
    psi = setup_8b.counts.total
    assert optimizer_seconds(replace(setup_8b, stage=0), HW) == pytest.approx(28 * psi / 1000e9)
    assert optimizer_seconds(setup_8b, HW) == pytest.approx(28 * psi / 8 / 1000e9)
    assert optimizer_seconds(replace(setup_8b, optimizer_offload="cpu"), HW) == pytest.approx(psi / 1000e6)


def test_offload_traffic(setup_8b):
    part = 2 * setup_8b.counts.total / 8
    assert offload_seconds(setup_8b, HW, 2) == 0
    opt = replace(setup_8b, stage=2, optimizer_offload="cpu")
    assert offload_seconds(opt, HW, 2) == pytest.approx((2 * part + part) / 20e9)  # grads per micro, params once
    both = replace(opt, stage=3, param_offload="cpu")
    assert offload_seconds(both, HW, 2) == pytest.approx((3 * part + 4 * part) / 20e9)
    nvme = replace(setup_8b, stage=3, optimizer_offload="nvme", param_offload="nvme")
    psi = setup_8b.counts.total
    pcie = 2 * part / 20e9  # gradients down, parameters up, on their way to and from the swap files
    assert offload_seconds(nvme, HW, 1) == pytest.approx(
        pcie + 12 * psi * (1 / 5 + 1 / 2) / 1e9 + 2 * psi * (2 / 5 + 1 / 2) / 1e9)


def test_step_time_sums_terms_and_counts_samples(setup_8b):
    t = step_time(setup_8b, replace(HW, micro_step_overhead_ms=10), 4)
    assert t.seconds == pytest.approx(sum(t.terms.values()))
    assert t.terms["overhead"] == pytest.approx(0.04)
    assert t.samples == setup_8b.micro_batch * 8 * 4 and t.per_sample == t.seconds / t.samples


def test_zero_gradient_path_per_parameter_and_micro_step(setup_8b):
    hw, psi = replace(HW, zero2_ns_per_param=2, zero3_ns_per_param=5), setup_8b.counts.total
    seconds = {stage: zero_seconds(replace(setup_8b, stage=stage), hw, 4) for stage in range(4)}
    # stage 0 has no ZeRO path; stage 1 reduces at the boundary only; stages 2-3 every micro-step
    assert seconds == pytest.approx({0: 0, 1: psi * 2e-9, 2: 4 * psi * 2e-9, 3: 4 * psi * 5e-9})
    lora = replace(setup_8b, stage=2, lora_r=8, lora_targets=("q_proj", "v_proj"))  # adapters only
    assert 0 < lora.adapters.total < psi and zero_seconds(lora, hw, 1) == pytest.approx(lora.adapters.total * 2e-9)
    assert step_time(replace(setup_8b, stage=3), hw, 4).terms["zero"] == seconds[3]
    assert zero_seconds(setup_8b, HW, 4) == 0  # a preset without the rates: the term is off


@pytest.mark.parametrize("gpu", GPUS)
def test_every_preset_is_complete(gpu, compose_cfg):
    cfg = compose_cfg(["cluster=1x8", f"cluster.gpu={gpu}", "cluster.gpu_memory_gb=24"])
    hw = hardware_from_config(cfg)
    assert hw.peak_tflops > 0 and hw.pcie_gbps > 0 and hw.nvme_write_gbps > 0
    assert hw.zero2_ns_per_param > 0 and hw.zero3_ns_per_param > 0


def test_cluster_and_user_overrides_win_over_the_preset(compose_cfg):
    cfg = compose_cfg(["cluster=2x8", "cluster.gpu=h100-80gb", "cluster.hardware.efficiency=0.3"])
    hw = hardware_from_config(cfg)
    assert (hw.peak_tflops, hw.efficiency, hw.inter_node_gbps) == (989, 0.3, 25)  # 2x8's network, not the GPU's


def test_a_hardware_file_loads(compose_cfg, tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text(open(os.path.join(HARDWARE_DIR, "cpu.yaml")).read().replace("peak_tflops: 0.03",
                                                                                     "peak_tflops: 0.5"))
    assert hardware_from_config(compose_cfg([f"cluster.gpu={path}"])).peak_tflops == 0.5


def test_hardware_mistakes_name_the_fix(compose_cfg):
    with pytest.raises(ConfigError, match=r"cluster.gpu=b200: no such preset or file. Use one of a100-40gb"):
        hardware_from_config(compose_cfg(["cluster.gpu=b200"]))
    with pytest.raises(ConfigError, match=r"gives no pcie_gbps. Set cluster.hardware.pcie_gbps="):
        hardware_from_config(compose_cfg(["cluster.hardware.pcie_gbps=0"]))
