"""The app as a user runs it: help, --cfg and dry runs (user mistakes: test_catalogue.py)."""
from conftest import read_json, run_app


def test_help_lists_every_group_and_common_overrides(tmp_path):
    out = run_app(["--help"], tmp_path / "run")
    assert out.returncode == 0, out.stderr
    for line in ["zero: auto, stage0, stage1, stage2, stage3", "offload: auto, cpu, none, nvme",
                 "cluster: 1x1, 1x8, 2x8, 4x8, local", "precision: auto, bf16, fp16, fp32", "dry_run=true",
                 "batch.global_size=64"]:
        assert line in out.stdout
    assert "llama3-70b" in out.stdout


def test_cfg_job_shows_composed_config(tmp_path):
    out = run_app(["--cfg", "job", "zero=stage3"], tmp_path / "run")
    assert out.returncode == 0, out.stderr
    assert "stage: 3" in out.stdout and "gpus_per_node: 2" in out.stdout


def test_dry_run_2x8_writes_run_dir_and_prints_every_node(tmp_path):
    run_dir = tmp_path / "run"
    out = run_app(["cluster=2x8", "zero=stage3", "model=llama3-8b", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    for rank in (0, 1):
        assert (f"node {rank}: torchrun --nnodes 2 --nproc_per_node 8 --node_rank {rank} --master_addr node-0 "
                f"--master_port 29500") in out.stdout
    for name in ["config.yaml", "ds_config.json", "trainer.yaml", "launch.sh", "env.json"]:
        assert (run_dir / name).is_file(), name
    ds = read_json(run_dir / "ds_config.json")
    assert ds["train_batch_size"] == 32 and ds["bf16"] == {"enabled": True} and ds["zero_optimization"]["stage"] == 3
    assert not (run_dir / "logs").exists() and not (run_dir / "summary.json").exists()  # nothing spawned
    assert read_json(run_dir / "env.json")["packages"]["deepspeed"]
