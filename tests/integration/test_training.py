"""Real training: torchrun with 2 CPU ranks over gloo, real DeepSpeed ZeRO 0-3, CPU and NVMe offload, TRL SFTTrainer."""
import math
import os

import pytest
from conftest import read_json, require
from stage_runs import STEPS, TINY, stage_run

from tests.integration.test_multinode import reference_run, tiny_model_dir
from trl_ds.rundir.layout import load_run_config

pytestmark = pytest.mark.integration

RUN_FILES = ["config.yaml", "ds_config.json", "trainer.yaml", "launch.sh", "env.json", "metrics.jsonl",
             "summary.json", "memory/rank_0.json", "memory/rank_1.json"]


def first_losses(run_dir):
    with open(run_dir / "metrics.jsonl") as f:
        import json
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


@pytest.mark.parametrize("name", TINY)
def test_trains_for_real(name, tmp_path_factory):
    if name == "stage3-nvme":
        require(os.path.exists("/usr/include/libaio.h"), "libaio-dev is not installed (apt-get install libaio-dev)")
    run_dir, out = stage_run(name, tmp_path_factory)
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "completed"
    assert summary["world_size"] == 2 and summary["distributed_type"] == "DEEPSPEED"
    assert summary["steps"] == STEPS and math.isfinite(summary["final_loss"])
    assert summary["final_loss"] < first_losses(run_dir)[0]  # it learns
    for rel in RUN_FILES:
        assert (run_dir / rel).is_file(), rel
    assert read_json(run_dir / "ds_config.json")["zero_optimization"]["stage"] == int(name[5])
    assert "final loss" in out.stdout and str(run_dir) in out.stdout


def test_zero_and_offload_keep_the_math(tmp_path_factory):
    """Same seed, data and weights: every step's loss and the final weights agree across ZeRO 0-3, CPU offload
    (DeepSpeedCPUAdam instead of torch's Adam) and NVMe offload, within fp32 summation-order noise."""
    from trl_ds.study.equivalence import compare

    require(os.path.exists("/usr/include/libaio.h"), "libaio-dev is not installed (apt-get install libaio-dev)")
    result = compare({name: str(stage_run(name, tmp_path_factory)[0]) for name in TINY})
    assert all(len(losses) == STEPS for losses in result["losses"].values()), result["losses"]
    assert result["max_loss_deviation"] < 1e-5 and result["max_weight_deviation"] < 1e-5, result


def test_nvme_offload_swaps_through_files_then_removes_them(tmp_path_factory):
    require(os.path.exists("/usr/include/libaio.h"), "libaio-dev is not installed (apt-get install libaio-dev)")
    run_dir, _ = stage_run("stage3-nvme", tmp_path_factory)
    # fp32 parameters (4 B) and optimizer partitions (fp32 master + 2 Adam moments) of 0.87 M params over 2 ranks
    assert read_json(run_dir / "summary.json")["nvme_swap_bytes"] > 4 * 870_000
    assert not (run_dir / "nvme" / "zero_stage_3").exists()


def test_stage3_rank_holds_only_its_partition(tmp_path_factory):
    """Created inside DeepSpeed's partitioned init: each of 2 ranks holds half the parameters (fp32). The 12.3M model:
    every weight matrix is above the persistence threshold; the norms kept whole are 0.1% of it."""
    run_dir, _ = stage_run("larger-stage3", tmp_path_factory)
    for rank in (0, 1):
        mem = read_json(run_dir / "memory" / f"rank_{rank}.json")
        held = sum(mem["model_states"]["params"].values())
        full = 4 * mem["parameters"]
        assert 0.49 * full < held < 0.52 * full, (held, full)


def test_model_from_a_local_folder(tmp_path_factory):
    """The launcher tests' shared reference run is one: 10 steps of the tiny model saved to a folder beforehand."""
    reference_run(tmp_path_factory)
    run_dir = tmp_path_factory.getbasetemp() / "reference_run"
    assert read_json(run_dir / "summary.json")["steps"] == 10
    assert load_run_config(str(run_dir)).model.name_or_path == tiny_model_dir(tmp_path_factory)
    assert not (run_dir / "model").exists()  # the given folder was used, nothing built
