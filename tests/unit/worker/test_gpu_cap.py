"""cluster.gpu_memory_gb on a bigger GPU: the allocator's cap, the whole-device slack, and the refusal's one line.

Device sizes are what the devices report (torch.cuda.get_device_properties(0).total_memory): the H200 of the first
GPU check (docs/gpu_check/results.json env.gpu.memory_bytes) and an H100 80GB HBM3 (nvidia-smi: 81559 MiB).
"""
import subprocess
import sys

import pytest

from trl_ds.worker.gpu_cap import applied_cap, cap_for

H200 = 150_109_880_320  # 139.80 GiB
H100 = 81559 * 2 ** 20  # 79.65 GiB


def test_a_smaller_size_caps_the_allocator_at_that_many_gib():
    cap = cap_for(24, H200, "NVIDIA H200", local_rank=3)
    assert cap.fraction == pytest.approx(25_769_803_776 / 150_109_880_320)  # 24 GiB in bytes / the device's bytes
    assert cap.fraction == pytest.approx(0.171673, abs=1e-6)
    assert not cap.refused
    assert cap.line == ("trl_ds: local GPU 3 (NVIDIA H200, 139.8 GiB) capped at cluster.gpu_memory_gb=24 GiB "
                        "(set_per_process_memory_fraction 0.1717)")
    record = cap.record(H200, 24)
    assert record["cap_bytes"] == 25_769_803_776 - 1 or record["cap_bytes"] == 25_769_803_776  # int() of a float
    assert record["device_total_bytes"] == H200 and record["gpu_memory_gb"] == 24


def test_the_cards_marketing_size_is_the_whole_device_not_a_mistake():
    # conf/cluster/1x8.yaml says 80 for an "80 GB" card, which has 79.65 GiB; the H200 preset's 141 on 139.8 GiB
    for requested, total in ((80, H100), (141, H200), (140, H200)):
        cap = cap_for(requested, total)
        assert cap.fraction is None and not cap.refused, (requested, cap)
        assert "is the whole device, no cap" in cap.line


def test_more_than_the_device_has_is_refused_with_the_size_that_would_work():
    cap = cap_for(80, 40 * 2 ** 30 - 2 ** 28, "NVIDIA A100-SXM4-40GB")  # 39.75 GiB
    assert cap.refused and cap.fraction is None
    assert cap.line == ("cluster.gpu_memory_gb=80 is more than this node's local GPU 0 (NVIDIA A100-SXM4-40GB, "
                        "39.8 GiB): the plan assumed memory this GPU does not have. Set cluster.gpu_memory_gb=39 "
                        "(or less to rehearse a smaller GPU).")
    assert cap_for(84, H100).refused  # 5.5 % above 79.65 GiB: past the slack
    assert not cap_for(83, H100).refused  # 4.2 % above: the whole device


def test_zero_is_a_cpu_clusters_value_and_caps_nothing():
    assert cap_for(0, H200).fraction is None and not cap_for(0, H200).refused


def test_a_cpu_rank_applies_nothing_and_records_nothing():
    # A fresh process: apply_gpu_cap keeps its cap per process
    code = ("from types import SimpleNamespace as N; from trl_ds.worker import gpu_cap; "
            "from trl_ds.worker.measure import peak_memory; "
            "gpu_cap.apply_gpu_cap(N(device='cpu', gpu_memory_gb=24), 0); "
            "print(gpu_cap.applied_cap(), 'gpu_cap' in peak_memory(0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "{} False"
    assert applied_cap() == {}


@pytest.mark.gpu  # conftest.require_machine: skipped without CUDA
def test_on_a_gpu_the_allocator_refuses_past_the_cap():
    code = """
import torch
from types import SimpleNamespace as N
from trl_ds.worker import gpu_cap
gpu_cap.apply_gpu_cap(N(device='cuda', gpu_memory_gb=2), 0)
keep = torch.empty(1024 ** 3, dtype=torch.uint8, device='cuda')  # 1 GiB: under the cap
try:
    more = torch.empty(2 * 1024 ** 3, dtype=torch.uint8, device='cuda')  # 3 GiB in all: over it
    print('NOT REFUSED')
except torch.cuda.OutOfMemoryError:
    print('REFUSED', gpu_cap.applied_cap()['gpu_cap']['cap_bytes'] // 2 ** 20)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "capped at cluster.gpu_memory_gb=2 GiB" in out
    assert out.strip().splitlines()[-1] in ("REFUSED 2048", "REFUSED 2047")
