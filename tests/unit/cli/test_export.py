"""`trl-ds export`: the three config files of a run, for people who keep their own scripts."""
import json
import subprocess
import sys

import yaml
from conftest import REPO


def export(args):
    return subprocess.run([sys.executable, "-m", "trl_ds.cli.export", *args], cwd=REPO, capture_output=True, text=True)


def test_export_writes_the_three_files(tmp_path):
    out = export(["--dir", str(tmp_path / "setup"), "trainer=dpo", "zero=stage3", "cluster=1x8"])
    assert out.returncode == 0, out.stderr
    assert "also set: model.name_or_path=... (the tiny model is built by trl_ds runs only)" in out.stdout
    assert sorted(p.name for p in (tmp_path / "setup").iterdir()) == ["accelerate.yaml", "ds_config.json",
                                                                      "trainer.yaml"]
    ds = json.loads((tmp_path / "setup" / "ds_config.json").read_text())
    assert ds["train_batch_size"] == 16 and ds["zero_optimization"]["stage"] == 3 and "auto" not in json.dumps(ds)
    trainer = yaml.safe_load((tmp_path / "setup" / "trainer.yaml").read_text())
    assert trainer["deepspeed"] == str(tmp_path / "setup" / "ds_config.json") and trainer["beta"] == 0.1
    acc = yaml.safe_load((tmp_path / "setup" / "accelerate.yaml").read_text())
    assert acc["num_processes"] == 8 and acc["deepspeed_config"]["deepspeed_config_file"] == trainer["deepspeed"]


def test_export_auto_flavour(tmp_path):
    out = export(["--dir", str(tmp_path), "--auto"])
    assert out.returncode == 0, out.stderr
    ds = json.loads((tmp_path / "ds_config.json").read_text())
    assert ds["train_batch_size"] == ds["optimizer"]["params"]["lr"] == ds["bf16"]["enabled"] == "auto"
    assert ds["zero_optimization"]["stage"] == 2  # the ZeRO choices stay concrete


def test_export_rejects_a_mistake_with_exit_2(tmp_path):
    out = export(["--dir", str(tmp_path / "x"), "zero=stage2", "offload.param=cpu"])
    assert out.returncode == 2
    assert "offload.param=cpu needs zero=stage3" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "x").exists()
    typo = export(["--dir", str(tmp_path / "x"), "zero.stagee=3"])
    assert typo.returncode == 2 and typo.stderr == ("trl-ds export: zero.stagee=3: zero has no key stagee (checked: "
                                                    "trl_ds's keys and DeepSpeed's zero_optimization). Did you mean "
                                                    "zero.stage?\n")
