"""tests/gpu/qlora_check.py (`gpu_check.sh OUT --qlora`) without a GPU: its run passes trl_ds's checks with the 4-bit
weights stored in bf16 at ZeRO-3, its offload_param probe is exactly the combination trl_ds refuses, the time box,
and tests/gpu/slim_wheel.py's bitsandbytes wheel that pip installs. The GPU run itself is not made here."""
import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile

from tests.gpu import gpu_check, qlora_check, slim_wheel

RUN = {"name": "llama3.2-1b_s3_none", "model": "llama3.2-1b", "stage": 3, "offload": "none", "trainer": "sft"}


def qlora_run(tmp_path):
    """build() on the QLoRA run's overrides (the preset's dimensions stand in for the model folder)."""
    from trl_ds.cli.app import build
    from trl_ds.config.compose import compose

    check = gpu_check.Check(str(tmp_path / "out"), str(tmp_path / "work"), qlora_check.gpu_mode(140), time.time())
    overrides = [o for o in gpu_check.run_overrides(check, RUN) if not o.startswith(("model.name_or_path=", "hydra."))]
    return check, overrides, build(compose(overrides), str(tmp_path / "run"), launching=False)


def test_the_qlora_run_stores_4bit_weights_in_bf16_at_zero3_and_plans_no_load_excess_on_one_gpu(tmp_path):
    check, _, prepared = qlora_run(tmp_path)
    assert check.mode.runs == [("llama3.2-1b", 3, "none")] and "bitsandbytes" in check.mode.packages
    assert prepared.ds_config["zero_optimization"]["stage"] == 3 and prepared.ds_config["bf16"]["enabled"]
    args = prepared.trainer_args
    assert (args["load_in_4bit"], args["bnb_4bit_quant_storage"], args["dtype"]) == (True, "bfloat16", "bfloat16")
    # one rank: ZeRO-3 partitions nothing, the step holds the whole model, so the load adds nothing
    current = prepared.plan["current"]
    assert current["device_bytes"]["quantized_load"] == 0
    memory = gpu_check.memory_comparison(current, None)
    assert memory["estimated_quantized_load_bytes"] == 0
    assert memory["estimated_peak_bytes"] == current["device_total_bytes"]


def test_the_offload_param_probe_is_the_run_dir_with_only_what_trl_ds_refuses_added(tmp_path):
    from trl_ds.check.quantization import check_quantization
    from trl_ds.config.compose import compose

    _, overrides, prepared = qlora_run(tmp_path)
    source = tmp_path / "src"
    (source / "memory").mkdir(parents=True)
    (source / "ds_config.json").write_text(json.dumps(prepared.ds_config))
    (source / "trainer.yaml").write_text("deepspeed: ./ds_config.json\n")
    with_it = qlora_check.probe_folder(str(source), str(tmp_path / "with"), offload=True)
    without = qlora_check.probe_folder(str(source), str(tmp_path / "without"), offload=False)
    assert sorted(os.listdir(with_it)) == ["ds_config.json", "trainer.yaml"]  # no measurements of the source run
    read = [json.loads(open(os.path.join(f, "ds_config.json")).read()) for f in (with_it, without)]
    assert gpu_check.differences(prepared.ds_config, read[0]) == [
        "zero_optimization.offload_param: None written, {'device': 'cpu', 'pin_memory': True} used"]
    assert gpu_check.differences(prepared.ds_config, read[1]) == []
    refused = check_quantization(compose([*overrides, "offload.param=cpu"]))
    assert len(refused) == 1 and refused[0].startswith("offload.param=cpu with peft.load_in_4bit=true: ")


def test_the_probe_runs_trls_sft_script_in_one_process_and_reads_its_peaks():
    compile(qlora_check.PEAK_SFT, "PEAK_SFT", "exec")
    assert importlib.util.find_spec("trl.scripts.sft") is not None
    text = "{'loss': '1.25'}\nPEAK 1000 2048\n"
    assert qlora_check.read_peak(text) == {"peak_allocated_bytes": 1000, "peak_reserved_bytes": 2048}
    assert qlora_check.read_peak("Traceback ...\n") is None
    assert gpu_check._loss_values(text) == ["1.25"]


def test_past_the_deadline_nothing_starts_and_the_results_say_why(tmp_path):
    check = gpu_check.Check(str(tmp_path / "out"), str(tmp_path / "work"), qlora_check.gpu_mode(140), time.time())
    check.mode.start_deadline = -1
    check.results["models"]["llama3.2-1b"] = {"status": "ok", "seconds": 1.0}
    check.results["ops"]["fused_adam"] = {"status": "ok", "seconds": 1.0}
    gpu_check.run_all(check, "/nonexistent/python")  # would fail loudly if anything were started
    qlora_check.param_offload(check, "/nonexistent/python")
    saved = json.loads(open(os.path.join(check.out, "results.json")).read())
    assert [(r["name"], r["status"]) for r in saved["runs"]] == [("llama3.2-1b_s3_none", "skipped")]
    assert saved["param_offload"] == {k: {"status": "skipped", "reason": "no completed ZeRO-3 run"}
                                      for k in ("without", "with")}
    report = qlora_check.render_report(saved)
    assert "TRL's sft script with offload_param: skipped (no completed ZeRO-3 run)." in report


def test_a_slimmed_wheel_keeps_the_named_library_and_pip_installs_it(tmp_path):
    wheel = tmp_path / "pkg-1.0-py3-none-manylinux_2_24_x86_64.whl"
    files = {"pkg/__init__.py": b"", "pkg/libpkg_cuda130.so": b"a" * 10, "pkg/libpkg_cuda128.so": b"b" * 99,
             "pkg/libpkg_cpu.so": b"c", "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\n"
             b"Version: 1.0\n", "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
             b"Tag: py3-none-manylinux_2_24_x86_64\n"}
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("pkg-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in files) + "pkg-1.0.dist-info/RECORD,,\n")
    assert slim_wheel.slim(str(wheel), "libpkg_", ["libpkg_cuda130.so", "libpkg_cpu.so"]) == ["pkg/libpkg_cuda128.so"]
    assert slim_wheel.slim(str(wheel), "libpkg_", ["libpkg_cuda130.so", "libpkg_cpu.so"]) == []  # idempotent
    with zipfile.ZipFile(wheel) as z:
        record = z.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
    digest = base64.urlsafe_b64encode(hashlib.sha256(b"a" * 10).digest()).rstrip(b"=").decode()
    assert f"pkg/libpkg_cuda130.so,sha256={digest},10" in record and len(record) == 6
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(target), str(wheel)], check=True, capture_output=True)
    assert sorted(os.listdir(target / "pkg")) == ["__init__.py", "libpkg_cpu.so", "libpkg_cuda130.so"]
