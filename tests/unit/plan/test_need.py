"""`trl-ds plan --need`: the hardware that can train a run, each shape's fastest configuration, sorted by GPU-hours.

Published cases, from DeepSpeed's ZeRO-Offload tutorial (deepspeedai/DeepSpeed docs/_tutorials/zero-offload.md at
74213e2, https://www.deepspeed.ai/tutorials/zero-offload/): "a 10-billion parameter GPT-2 model" (line 9) on "a single
NVIDIA Tesla V100-SXM3 Tensor Core GPU with 32GB RAM" (line 15), launched with `--num-layers 50 --hidden-size 4096
--num-attention-heads 32 --batch-size 10 --checkpoint-activations` and one GPU (lines 23-31, 36-38), ZeRO stage 2
with the optimizer offloaded to the CPU (lines 43-54). The tutorial names no sequence length: the DeepSpeedExamples
Megatron-LM GPT-2 scripts it edits use `--seq-length 1024 --max-position-embeddings 1024`
(microsoft/DeepSpeedExamples Megatron-LM/scripts/ds_zero2_pretrain_gpt2_model_parallel.sh at 057d74b, lines 19-20).
The ZeRO-Offload paper's abstract (Ren et al. 2021, arXiv 2101.06840): on one V100 PyTorch alone trains at most a
1.4B-parameter model "without running out of memory". So: the 10B model fits one 32 GB V100 with ZeRO-Offload, and
does not fit it, nor 8 of them, as plain data parallelism (zero=stage0 offload=none). The V100 is described by a
hardware file, as a user would (--gpus FILE); its host is a DGX-2 node (1.5 TB of RAM).
"""
import json

import pytest
from conftest import REPO

from trl_ds.cli.plan import main
from trl_ds.plan.need import need

IMPORTED = REPO / "tests" / "data" / "imported"
# the tutorial's model: 50 layers x hidden 4096 x 32 heads (12 L h^2 = 10.1B in the layers), GPT-2's vocabulary
GPT2_10B = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 4096, "n_layer": 50, "n_head": 32,
            "n_positions": 1024}
V100 = ("memory_gb: 32\npeak_tflops: 125\nefficiency: 0.4\nhbm_gbps: 900\npcie_gbps: 12\nintra_node_gbps: 150\n"
        "inter_node_gbps: 12.5\ncollective_latency_us: 30\ncomm_overlap: 0.8\nnvme_read_gbps: 3\nnvme_write_gbps: 2\n"
        "cpu_adam_mparams_per_s: 1000\nmicro_step_overhead_ms: 10\nzero2_ns_per_param: 0.013\n"
        "zero3_ns_per_param: 0.013\nzero3_us_per_module: 1300\n")  # V100 SXM3 datasheet: 125 TFLOPs fp16, 900 GB/s


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2-10b")
    (folder / "config.json").write_text(json.dumps(GPT2_10B))
    (folder / "v100-32gb.yaml").write_text(V100)
    overrides = [f"model.config_path={folder}", "trainer.max_length=1024", "cluster.cpu_memory_gb=1500"]
    return overrides, str(folder / "v100-32gb.yaml")


def test_zero_offload_trains_the_10b_gpt2_on_one_v100(tutorial):
    overrides, v100 = tutorial
    # the tutorial's batch of 10 on its one GPU; the planner picks the micro-batch (see docs/planner.md for 10)
    answer = need([*overrides, "batch.global_size=10", "zero=stage2", "offload=cpu",
                   "trainer.gradient_checkpointing=true"], [v100], [1])
    fitting, misfits = answer.fitting, answer.misfits
    assert misfits == [] and [s.gpus for s in fitting] == [1]
    one = fitting[0]
    assert one.smallest and one.best.estimate.device_total <= 32 * 2 ** 30
    assert one.best.label().startswith("zero=stage2 offload=opt-cpu micro=")


def test_plain_data_parallelism_cannot_train_it_on_one_v100_nor_eight(tutorial):
    overrides, v100 = tutorial
    # 10 samples per GPU on 8 of them (the tutorial's per-GPU batch)
    answer = need([*overrides, "batch.global_size=80", "zero=stage0", "offload=none"], [v100], [1, 8])
    fitting, misfits = answer.fitting, answer.misfits
    assert fitting == [] and [s.gpus for s in misfits] == [1, 8]
    # 16 B per parameter on every rank (ZeRO paper: 2 + 2 + 12), more than 32 GB whatever the batch
    assert all("nothing fits (smallest " in s.why_not for s in misfits)


def test_gpu_hours_and_order_on_shipped_presets(capsys):
    args = ["--need", "--gpus", "a100-80gb,h100-80gb", "--counts", "1,8", "model=llama3-8b", "trainer.max_length=2048",
            "batch.global_size=64", "trainer.max_steps=100", "--json"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)["fitting"]
    assert {(r["gpu"], r["gpus"]) for r in rows} == {("a100-80gb", 1), ("a100-80gb", 8), ("h100-80gb", 1),
                                                     ("h100-80gb", 8)}
    for r in rows:  # 100 steps x seconds per step x GPUs / 3600 s per hour
        assert r["whole_run"]["gpu_hours"] == pytest.approx(100 * r["step_seconds"] * r["gpus"] / 3600)
    hours = [r["whole_run"]["gpu_hours"] for r in rows]
    assert hours == sorted(hours)
    # the smallest that fits: least GPU memory in all (80 GiB x 1); of the two single GPUs, the cheaper
    singles = [r for r in rows if r["gpus"] == 1]
    assert [r for r in rows if r["smallest"]] == [min(singles, key=lambda r: r["whole_run"]["gpu_hours"])]


def test_the_counts_that_cannot_hold_the_batch_are_skipped_with_why(capsys):
    """#61: the default counts (1, 8, 16, 32) at batch.global_size=8 refused the whole question over 16 GPUs."""
    assert main(["--need", "--gpus", "h100-80gb", "model=llama3-8b", "batch.global_size=8", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert sorted(r["gpus"] for r in answer["fitting"] + answer["not_fitting"]) == [1, 8]
    assert answer["skipped"] == [{"gpus": 16, "why": "batch.global_size=8 has fewer samples than 16 GPUs"},
                                 {"gpus": 32, "why": "batch.global_size=8 has fewer samples than 32 GPUs"}]
    assert main(["--need", "--gpus", "h100-80gb", "--counts", "1,3", "model=llama3-8b", "batch.global_size=8"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "skipped: 3 GPUs: batch.global_size=8 does not divide over 3 GPUs"


def test_every_row_prints_the_overrides_that_launch_it(capsys):
    """#61: a partial offload printed `offload=opt-cpu@0.25`, not an override. Each row's run line, composed as the
    launch composes it, is the configuration the row describes: its ratio, its sub-group size, its memory."""
    from trl_ds.check.plan_rows import config_problems
    from trl_ds.cli.plan import plan

    assert main(["--need", "--gpus", "h100-80gb", "--counts", "1,8", "model=llama3-8b", "batch.global_size=8",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["fitting"]
    partial = [r for r in rows if any(o.startswith("offload.ratio=") for o in r["overrides"])]
    assert partial, "no partial offload among the rows: the case this test is about is gone"
    for row in rows:
        command = row["command"].split()
        assert command[:3] == ["python", "-m", "trl_ds"] and set(row["overrides"]) <= set(command)
        cfg, _, current, _ = plan(command[3:])
        assert config_problems(cfg) == []
        assert current.device_total == row["device_total_bytes"]
        assert (cfg.cluster.gpus_per_node * cfg.cluster.nodes, cfg.cluster.gpu) == (row["gpus"], row["gpu"])
    ratio = next(o for o in partial[0]["overrides"] if o.startswith("offload.ratio="))
    assert 0 < float(ratio.split("=")[1]) < 1
    assert any(o.startswith("zero.sub_group_size=") for o in partial[0]["overrides"])


def test_the_table_marks_the_smallest(capsys):
    assert main(["--need", "--gpus", "h100-80gb", "--counts", "1,8", "model=llama3-8b", "batch.global_size=64",
                 "trainer.max_steps=100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marked = [line for line in lines if line.startswith("*")]
    assert len(marked) == 1 and marked[0].split()[1:4] == ["h100-80gb", "1", "1"]


@pytest.mark.parametrize("args,message", [
    (["model=llama3-8b"], "trl-ds plan --need compares cluster shapes at one global batch: set batch.global_size "
                          "(e.g. batch.global_size=64)."),
    (["model=llama3-8b", "batch.global_size=12", "--counts", "8,16"],
     "batch.global_size=12 divides over none of --counts 8,16: use a multiple of one of them (e.g. "
     "batch.global_size=64), or name counts that divide it."),
    (["--counts", "1,12", "batch.global_size=48"], "--counts 1,12: give GPU counts, 1 to 8 or whole nodes of 8, e.g. "
                                                   "--counts 1,8,16,32."),
    (["--gpus"], "--gpus needs a value, e.g. --gpus a100-80gb,h100-80gb."),
])
def test_mistakes_are_one_line(args, message, capsys):
    assert main(["--need", *args]) == 2
    assert capsys.readouterr().err.strip() == f"trl-ds plan: {message}"


def rows_launch_as_planned(rows):
    """Each row's run line, composed as the launch composes it (its files read by the one resolve), is the row."""
    from trl_ds.cli.plan import plan

    for row in rows:
        cfg, _, current, _ = plan(row["command"].split()[3:])
        assert current.device_total == row["device_total_bytes"]
        assert (cfg.cluster.gpus_per_node * cfg.cluster.nodes, cfg.cluster.gpu) == (row["gpus"], row["gpu"])
        yield cfg, current.setup


def test_a_zero3_deepspeed_file_plans_every_shape_at_zero3(capsys):
    """#59: --need composed each shape without the files: a ZeRO-3 DeepSpeed JSON left zero open (or, refused by
    the launch's check, nothing fitted anywhere). The file's stage, read from the file itself, is every row's."""
    path = IMPORTED / "llamafactory_ds_z3_config.json"
    stage = json.loads(path.read_text())["zero_optimization"]["stage"]
    assert main(["--need", "--gpus", "h100-80gb", "--counts", "1,8", "model=llama3-8b", "batch.global_size=64",
                 f"deepspeed.from_file={path}", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["not_fitting"] == [] and sorted(r["gpus"] for r in answer["fitting"]) == [1, 8]
    for row in answer["fitting"]:
        assert row["configuration"].startswith(f"zero=stage{stage} ")
        assert not any(o.startswith("zero=") for o in row["overrides"])  # not a choice: the file made it
        assert f"deepspeed.from_file={path}" in row["command"].split()
    assert [setup.stage for _, setup in rows_launch_as_planned(answer["fitting"])] == [stage, stage]


def test_an_accelerate_yaml_plans_its_stage_precision_and_processes(capsys):
    """#59: trl's zero3.yaml (zero_stage 3, offload none, bf16, num_processes 8) under --need: the 8-GPU shape is
    planned as the file says; one GPU is not its world, refused with the launch's own line."""
    path = IMPORTED / "trl_accelerate_zero3.yaml"
    assert main(["--need", "--gpus", "h100-80gb", "--counts", "1,8", "model=llama3-8b", "batch.global_size=64",
                 f"launcher.from_accelerate={path}", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [r["gpus"] for r in answer["fitting"]] == [8]
    assert answer["fitting"][0]["configuration"].startswith("zero=stage3 offload=none ")
    [(cfg, setup)] = rows_launch_as_planned(answer["fitting"])
    assert (setup.stage, setup.optimizer_offload, setup.param_offload, setup.dtype) == (3, "none", "none", "bf16")
    [misfit] = answer["not_fitting"]
    assert misfit["gpus"] == 1 and "num_processes: 8 is not this cluster's world 1" in misfit["why_not"]
