"""`python -m trl_ds.plan`: the table, the recommendation, the JSON, no torch import; and the app's preflight."""
import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, read_json, run_app

from trl_ds.plan.grid import OFFLOADS, valid
from trl_ds.plan.memory import GiB, setup_from_config
from trl_ds.plan.planner import grid, recommend

PSI_70B, L_MAX_70B = 70_553_706_496, 128_256 * 8192
ARGS_70B = ["model=llama3-70b", "cluster=1x8", "trainer.max_length=2048"]


def plan(*args):
    return subprocess.run([sys.executable, "-m", "trl_ds.plan", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_table_and_recommendation_for_llama3_70b():
    out = plan(*ARGS_70B)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("trl_ds plan: llama3-70b (70.55B parameters, largest module 1.05B), bf16, "
                        "sequence 2048 tokens")
    assert lines[1] == ("architecture: llama, 80 layers, hidden 8192, from preset model=llama3-70b; count exact "
                        "(transformers on the meta device)")
    assert lines[2].startswith("cluster 1x8: 1 node(s) x 8 cuda rank(s), 80 GiB per GPU, 1024 GiB host RAM")
    assert lines[5].split() == ["zero", "offload", "ckpt", "micro", "params", "gradients", "optimizer", "activations",
                                "logits", "buffers", "overhead", "per-rank", "host/node", "nvme/node", "s/step",
                                "s/sample", "verdict"]
    rows = lines[7:7 + 90]
    # ZeRO-3, optimizer and parameters on CPU, checkpointing, micro 1: 2·L_max + 2·L_max on the GPU
    row = next(r for r in rows if r.split()[:4] == ["3", "opt+param-cpu", "yes", "1"])
    assert row.split()[4:8] == ["2.0", "2.0", "0.0", "3.3"] and row.endswith("does not fit in host RAM")
    # rows that fit first, each part by estimated seconds per sample (the s/sample column)
    per_sample = [float(r.split()[-2]) for r in rows[:4]]
    assert all(r.endswith(" fits") for r in rows[:4]) and per_sample == sorted(per_sample)
    # Expected figures by hand, from Ψ, the model's shape and the a100-80gb preset's datasheet rates:
    current = next(r for r in rows if r.split()[:4] == ["2", "none", "no", "2"])
    cols = [float(x) for x in current.split()[4:12]]
    # ZeRO-2, bf16, 8 ranks: 2Ψ weights, a 2Ψ/8 gradient partition (the step's fp32 copy is smaller than the
    # activations), 12Ψ/8 fp32 master + Adam (ZeRO paper)
    assert cols[:3] == [round(2 * PSI_70B / GiB, 1), round(2 * PSI_70B / 8 / GiB, 1), round(12 * PSI_70B / 8 / GiB, 1)]
    # overhead: 1 GiB CUDA context + 25 % of the allocated terms (reserved/allocated measured 1.16-1.32 on the H200)
    assert cols[6] == pytest.approx(1 + 0.25 * sum(cols[:6]), abs=0.1)
    assert cols[7] == pytest.approx(sum(cols[:7]), abs=0.1)  # per-rank: the sum of its columns
    assert f"current:     zero=stage2 offload=none ckpt=no micro=2: {cols[7]:.1f} GiB per rank" in out.stdout
    assert "recommended: zero=stage3 offload=nvme ckpt=yes micro=8: " in out.stdout
    why = next(line for line in lines if line.startswith("  why: "))
    terms = dict(re.findall(r"(compute|optimizer|offload) ([0-9.]+)", why))
    tokens, layers, attn = 8 * 2048, 80, 64 * 128  # micro 8 × 2048 tokens per rank; 80 layers × 64 heads × 128
    # 6 FLOPs per matmul parameter + one recomputed forward (2) with checkpointing; attention scores 12·L·s·a·d
    # (+4 recomputed); the input embedding is a lookup. 312 TFLOPs bf16 (A100 datasheet) × the preset's 40 %.
    matmul = PSI_70B - L_MAX_70B
    flops = tokens * (8 * matmul + 16 * layers * 2048 * attn)
    assert float(terms["compute"]) == pytest.approx(flops / (312e12 * 0.4), rel=0.01)
    assert float(terms["optimizer"]) == pytest.approx(PSI_70B / 2000e6, rel=0.01)  # CPU Adam, 2000 Mparams/s
    # ZeRO-Infinity: 12 B fp32 master + moments read and written (NVMe 6 GB/s read, 4 write), 16-bit params read in
    # forward and backward and written once; 16-bit gradients down and params up over PCIe (25 GB/s)
    nvme = 12 * PSI_70B * (1 / 6 + 1 / 4) + 2 * PSI_70B * (2 / 6 + 1 / 4)
    assert float(terms["offload"]) == pytest.approx((nvme + 2 * 2 * PSI_70B / 8 / 25) / 1e9, rel=0.01)
    assert lines[-3] == (
        "  run: python -m trl_ds model=llama3-70b cluster=1x8 trainer.max_length=2048 zero=stage3 offload=nvme "
        "trainer.gradient_checkpointing=true trainer.per_device_train_batch_size=8")
    assert lines[-2].startswith("whole run, current: 10 steps (trainer.max_steps) × ")  # test_runtime.py
    assert lines[-1].startswith("whole run, recommended: 10 steps (trainer.max_steps) × ")


def test_json_holds_every_row_and_the_same_recommendation():
    out = plan(*ARGS_70B, "cluster.gpu_memory_gb=141", "cluster.cpu_memory_gb=2048", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["parameters"], data["largest_module"]) == (PSI_70B, L_MAX_70B)
    assert len(data["rows"]) == 2 * 5 * sum(valid(s, o) for s in range(4) for o in OFFLOADS)  # 90
    row = next(r for r in data["rows"] if (r["zero_stage"], r["offload"], r["gradient_checkpointing"],
                                           r["micro_batch"]) == (3, "none", True, 1))
    assert row["device_bytes"]["params"] == 2 * L_MAX_70B + int(2 * PSI_70B / 8)
    assert row["device_bytes"]["optimizer"] == int(12 * PSI_70B / 8)
    assert row["device_total_bytes"] == sum(row["device_bytes"].values())
    assert row["verdict"] == "does not fit"  # 197 GiB > 141
    best = data["recommendation"]
    assert (best["zero_stage"], best["offload"], best["gradient_checkpointing"], best["micro_batch"]) == \
        (3, "opt-cpu", True, 16)  # NVMe-free; checkpointing buys micro 16, whose CPU Adam step serves 128 samples
    assert best["device_total_bytes"] <= 141 * GiB and best["verdict"] == "fits"
    assert best["command"].endswith("zero=stage3 offload=cpu trainer.gradient_checkpointing=true "
                                    "trainer.per_device_train_batch_size=16")
    assert best["step_seconds"] == pytest.approx(sum(best["step_terms"].values()))


def test_the_recommendation_is_the_fastest_that_fits(compose_cfg):
    # 90 GiB: ZeRO-1 without recomputation (82.5 GiB) fits beside ZeRO-2 (65.0 GiB, 95.7 at micro-batch 2); at 80 GiB
    # only ZeRO-2 does
    rows = grid(setup_from_config(compose_cfg(["model=llama3-8b", "cluster=2x8", "trainer.max_length=4096",
                                               "cluster.gpu_memory_gb=90"])))
    best = recommend(rows)
    assert (best.setup.stage, best.setup.optimizer_offload, best.setup.gradient_checkpointing,
            best.setup.micro_batch) == (2, "none", False, 1)
    fits = [r for r in rows if r.verdict == "fits"]
    # stages 1 and 2 fit too without offload or recomputation at micro-batch 1; ZeRO-2 leaves the most headroom
    same_speed = [r for r in fits if r.setup.stage < 3 and r.setup.optimizer_offload == "none"
                  and not r.setup.gradient_checkpointing]
    assert {r.setup.stage for r in same_speed} == {1, 2} and {r.setup.micro_batch for r in same_speed} == {1}
    assert best.device_total == min(r.device_total for r in same_speed)


def test_global_batch_limits_the_micro_batches(compose_cfg):
    rows = grid(setup_from_config(compose_cfg(["batch.global_size=8"])), global_size=8)  # 2 CPU ranks
    assert sorted({r.setup.micro_batch for r in rows}) == [1, 2, 4]


def test_plan_imports_neither_torch_nor_deepspeed():
    code = ("import sys, runpy; sys.argv = ['trl_ds.plan', 'model=llama3-70b', 'cluster=1x8', '--json']\n"
            "try:\n    runpy.run_module('trl_ds.plan', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_user_config_json_is_planned(tmp_path):
    config = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
              "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = plan(f"model.config_path={tmp_path}/config.json", "cluster=1x1", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model"].endswith("config.json")
    assert data["parameters"] == 1_100_048_384  # TinyLlama-1.1B's published count


def test_mistakes_exit_2_with_one_message(tmp_path):
    out = plan("model=nope")
    assert out.returncode == 2 and "Could not find 'model/nope'" in out.stderr
    out = plan(f"model.config_path={tmp_path}/missing.json")
    assert out.returncode == 2
    assert f"model.config_path={tmp_path}/missing.json cannot be read as a model's config.json" in out.stderr


def test_app_refuses_before_spawning_and_names_the_fix(tmp_path):
    """A real launch that cannot fit is refused; preflight.memory=error is the default on GPU clusters."""
    out = run_app(["model=llama3-70b", "preflight.memory=error", "zero=stage0"], tmp_path / "run", timeout=120)
    assert out.returncode == 2
    assert "model=llama3-70b does not fit on cluster=local (ZeRO-0, offload none, micro-batch 2, 64 tokens)" \
        in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


def test_dry_run_warns_and_writes_the_plan(tmp_path):
    out = run_app(["model=llama3-70b", "cluster=1x8", "zero=stage0", "dry_run=true"], tmp_path / "run", timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("trl_ds: warning: model=llama3-70b does not fit on cluster=1x8 (ZeRO-0, offload none, micro-batch 2, "
            "64 tokens): estimated 1655.8 GiB per GPU") in out.stderr  # 1 GiB + 1.25 x 1323.8 (was 1 + 1.1 x 1323.8)
    # ZeRO-3 of 70B: no live parameters beyond its 1.05B-parameter largest module (max_live 1e9), and no prefetch
    # bucket: 1 + 1.25 x (16.1 / 1.1 - 0.09) GiB
    assert "The smallest change that fits: zero=stage3 offload=nvme (estimated 19.2 GiB per rank" in out.stderr
    assert (tmp_path / "run" / "plan.json").is_file()


def test_app_writes_plan_json_and_warns_when_asked(tmp_path):
    out = run_app(["model=llama3-70b", "cluster=1x8", "zero=stage0", "dry_run=true", "preflight.memory=warn"],
                  tmp_path / "run", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "trl_ds: warning: model=llama3-70b does not fit" in out.stderr
    saved = read_json(tmp_path / "run" / "plan.json")
    assert saved["preflight"] == {"memory": "warn", "verdict": "does not fit"}
    assert saved["current"]["device_bytes"]["optimizer"] == 12 * PSI_70B
    assert saved["recommendation"]["command"].startswith("python -m trl_ds model=llama3-70b cluster=1x8 zero=stage3")


@pytest.mark.parametrize("mode,expected", [("auto", "warn"), ("off", "off")])
def test_cpu_default_is_warn(compose_cfg, mode, expected):
    from trl_ds.plan.planner import preflight_mode

    assert preflight_mode(compose_cfg([f"preflight.memory={mode}"])) == expected
    assert preflight_mode(compose_cfg(["cluster=1x8"])) == "error"
