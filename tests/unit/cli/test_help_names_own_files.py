"""#61: `trl-ds run --help` named none of the keys users bring their own things with. Each command that takes
overrides names them in its --help: run (Hydra's help, conf/hydra/help/), plan, export, fit, doctor, and
`trl-ds --help`."""
import subprocess
import sys

import pytest
from conftest import REPO

from trl_ds.cli.doctor import main as doctor_main
from trl_ds.cli.plan import main as plan_main

OWN = ("script=", "deepspeed.from_file=", "launcher.from_accelerate=", "trainer.from_trl_config=")


@pytest.mark.slow  # fresh interpreters (Hydra's help: 4 s each): make test runs them, make test-fast does not
@pytest.mark.parametrize("command", [["-m", "trl_ds", "--help"], ["-m", "trl_ds.cli", "run", "--help"],
                                     ["-m", "trl_ds.cli", "--help"], ["-m", "trl_ds.cli", "export", "--help"],
                                     ["-m", "trl_ds.cli", "fit", "--help"], ["-m", "trl_ds.cli", "doctor", "--help"]])
def test_each_commands_help_names_them(command):
    out = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert all(key in out.stdout for key in OWN), out.stdout


def test_plan_help_names_them_and_its_flags(capsys):
    assert plan_main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(key in text for key in OWN)
    assert all(flag in text for flag in ("--json", "--fits", "--tokens", "--plot", "--need", "--gpus", "--counts"))


def test_doctor_help_names_them(capsys):
    assert doctor_main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(key in text for key in OWN), text
