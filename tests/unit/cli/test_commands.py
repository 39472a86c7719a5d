"""`trl-ds COMMAND`: the registry lists every command, each --help runs, `python -m trl_ds.plan` is `trl-ds plan`.

Run as `python -m trl_ds.cli`, the same `main` the `trl-ds` console script calls (pyproject [project.scripts]).
"""
import ast
import subprocess
import sys

import pytest

from tests.conftest import REPO

# What a newcomer reads in `trl-ds --help` and each command's usage line: written here, not read from trl_ds.
EXPECTED = {
    "run": "trl_ds: one checked, resolved DeepSpeed + TRL run",
    "plan": "`trl-ds plan [--json] [--fits] [--tokens N]",
    "fit": "usage: trl-ds fit",
    "watch": "usage: trl-ds watch",
    "report": "usage: trl-ds report",
    "export": "usage: trl-ds export",
    "doctor": "usage: trl-ds doctor",
    "env": "usage: trl-ds env",
    "calibrate": "usage: trl-ds calibrate",
    "check-equivalence": "usage: trl-ds check-equivalence",
    "build-ops": "usage: trl-ds build-ops",
}


def trl_ds(*args, module="trl_ds.cli"):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_help_lists_every_command_on_one_line():
    out = trl_ds("--help")
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    assert listed == list(EXPECTED)


@pytest.mark.parametrize("command", list(EXPECTED))
def test_each_command_has_its_own_help(command):
    out = trl_ds(command, "--help")
    assert out.returncode == 0, out.stderr
    assert EXPECTED[command] in out.stdout


def test_no_command_or_an_unknown_one_is_a_user_mistake():
    none = trl_ds()
    assert none.returncode == 2 and "usage: trl-ds COMMAND" in none.stderr
    typo = trl_ds("paln")
    assert typo.returncode == 2
    assert typo.stderr == ("trl-ds: unknown command 'paln'. Did you mean `trl-ds plan`? Commands: run, plan, fit, "
                           "watch, report, export, doctor, env, calibrate, check-equivalence, build-ops.\n")


@pytest.mark.slow  # whole products or fresh interpreters: make test only
def test_a_command_takes_the_same_overrides_and_exit_codes_as_its_module_form():
    args = ["model=llama3-8b", "cluster=1x8", "--json"]
    new, old = trl_ds("plan", *args), trl_ds(*args, module="trl_ds.plan")
    assert new.returncode == old.returncode == 0 and new.stdout == old.stdout and '"rows"' in new.stdout
    mistake = trl_ds("plan", "zero=stage9")
    assert mistake.returncode == 2 and "trl-ds plan: " in mistake.stderr and "stage9" in mistake.stderr


def test_a_command_reads_its_arguments_without_sys_argv_rewritten(monkeypatch, capsys):
    """cli/main.py handed each command its arguments by rewriting sys.argv (#60 item 4); the registry passes them."""
    from trl_ds.cli.main import main

    monkeypatch.setattr(sys, "argv", ["trl-ds", "untouched"])
    assert main(["check-equivalence", "--global-batch", "6"]) == 2
    assert sys.argv == ["trl-ds", "untouched"]
    assert "--global-batch 6 must be divisible by 4" in capsys.readouterr().err


def test_every_command_is_registered_with_register_and_run():
    from trl_ds.cli.commands import COMMANDS

    assert [c.name for c in COMMANDS] == list(EXPECTED)
    assert all(callable(c.register) and callable(c.run) for c in COMMANDS)


def argparse_users():
    for path in sorted((REPO / "trl_ds").rglob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Import) and any(a.name == "argparse" for a in n.names) or
               isinstance(n, ast.ImportFrom) and n.module == "argparse" for n in ast.walk(tree)):
            yield str(path.relative_to(REPO))


def test_no_argparse_parser_outside_cli_but_a_rank_entry_point():
    """A user command parses in trl_ds/cli/ (#60: report, env, calibrate, check-equivalence and build-ops parsed in
    study/ and launch/); the libraries take values. worker/fit.py is the rank process `trl-ds fit` spawns."""
    assert [p for p in argparse_users() if not p.startswith("trl_ds/cli/")] == ["trl_ds/worker/fit.py"]
