"""A parser verdict that accepted is asked once per script and arguments (trl_ds/check/parser_cache.py): the same
script and arguments in another run dir read it back; anything the parser reads, changed, asks again."""
import os
import shutil
import time

import pytest
from conftest import run_app

from trl_ds.check import parser_cache
from trl_ds.check.parser_cache import MAX_FILES, accepted_before, remember_accepted, verdict_key
from trl_ds.check.script import parser_verdict
from trl_ds.rundir.layout import load_run_config

SCRIPT = '''import os
from transformers import HfArgumentParser, TrainingArguments
from helper import Paths

with open(os.environ["MARKER"], "a") as f:  # each process that runs the script up to its parser adds a line
    f.write("ran\\n")
HfArgumentParser((Paths, TrainingArguments)).parse_args_into_dataclasses()
'''
HELPER = '''from dataclasses import dataclass


@dataclass
class Paths:
    data_file: str = "data/train.jsonl"
'''


@pytest.fixture(scope="module")
def script_run(tmp_path_factory):
    """A user's folder (train.py, the helper module it imports) and one dry run of it."""
    folder = tmp_path_factory.mktemp("parser_cache")
    (folder / "user").mkdir()
    (folder / "user" / "train.py").write_text(SCRIPT)
    (folder / "user" / "helper.py").write_text(HELPER)
    run_dir = folder / "run"
    out = run_app([f"script={folder / 'user' / 'train.py'}", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    return folder


@pytest.fixture
def case(script_run, tmp_path, monkeypatch):
    """A fresh copy of the user's folder and run dir (which names the copy's script, as the check reads it there),
    and an empty cache."""
    folder = tmp_path / "case"
    shutil.copytree(script_run, folder)
    config = folder / "run" / "config.yaml"
    config.write_text(config.read_text().replace(str(script_run), str(folder)))
    monkeypatch.setenv("TRL_DS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MARKER", str(tmp_path / "marker"))
    monkeypatch.chdir(folder)
    cfg = load_run_config(str(folder / "run"))
    assert cfg.script == str(folder / "user" / "train.py")
    return folder, cfg


def test_the_same_script_and_arguments_in_another_run_dir_read_the_verdict_back(case):
    """script_args naming files in the run dir name the new run dir's (scripts/bench_accelerate.py's --model)."""
    folder, cfg = case
    cfg.script_args.append(f"--data_file={folder / 'run' / 'data' / 'train.jsonl'}")
    remember_accepted(verdict_key(cfg, str(folder / "run")), cfg.script, [])
    shutil.copytree(folder / "run", folder / "run2")
    cfg.script_args[-1] = f"--data_file={folder / 'run2' / 'data' / 'train.jsonl'}"
    assert accepted_before(verdict_key(cfg, str(folder / "run2")))


@pytest.mark.parametrize("change", ["script", "module beside it", "trainer.yaml", "ds_config.json", "script_args",
                                    "world size", "launched from elsewhere"])
def test_anything_the_parser_reads_changed_asks_again(case, change, monkeypatch):
    folder, cfg = case
    run_dir = str(folder / "run")
    remember_accepted(verdict_key(cfg, run_dir), cfg.script, [])
    assert accepted_before(verdict_key(cfg, run_dir))
    edits = {
        "script": lambda: (folder / "user" / "train.py").write_text(SCRIPT + "# edited\n"),
        "module beside it": lambda: (folder / "user" / "helper.py").write_text(HELPER.replace("data/", "rows/")),
        "trainer.yaml": lambda: _edit(folder / "run" / "trainer.yaml", "learning_rate: 0.001", "learning_rate: 0.01"),
        "ds_config.json": lambda: _edit(folder / "run" / "ds_config.json", '"stage": 2', '"stage": 1'),
        "script_args": lambda: cfg.script_args.append("--data_file=x.jsonl"),
        "world size": lambda: setattr(cfg.cluster, "nodes", 2),
        "launched from elsewhere": lambda: monkeypatch.chdir(folder / "user"),
    }
    edits[change]()
    assert not accepted_before(verdict_key(cfg, run_dir))


def test_a_folder_too_large_to_fingerprint_is_never_kept(case):
    folder, cfg = case
    for i in range(MAX_FILES):
        (folder / "user" / f"m{i}.py").write_text("")
    assert verdict_key(cfg, str(folder / "run")) is None
    remember_accepted(verdict_key(cfg, str(folder / "run")), cfg.script, [])
    assert not os.path.exists(os.path.join(os.environ["TRL_DS_CACHE"], parser_cache.KIND))


def _edit(path, old, new):
    text = path.read_text()
    assert old in text, (old, text)
    path.write_text(text.replace(old, new))


@pytest.mark.slow
def test_the_check_runs_once_then_again_when_an_imported_module_changes(case):
    """The real check, in its own interpreter: the marker counts the processes that ran the script to its parser."""
    folder, cfg = case
    run_dir, marker = str(folder / "run"), folder.parent / "marker"
    assert parser_verdict(cfg, run_dir) == [] and marker.read_text() == "ran\n"
    start = time.monotonic()
    assert parser_verdict(cfg, run_dir) == [] and marker.read_text() == "ran\n"
    assert time.monotonic() - start < 1.0  # no interpreter started (the check's own takes ~5 s here)
    (folder / "user" / "helper.py").write_text(HELPER.replace(' = "data/train.jsonl"', ""))  # now required
    refused = parser_verdict(cfg, run_dir)
    assert marker.read_text() == "ran\nran\n"
    assert len(refused) == 1 and refused[0].endswith(
        "the following arguments are required: --data_file/--data-file. Fix script_args or the trainer keys."), refused


@pytest.mark.slow
def test_a_module_imported_from_pythonpath_that_changed_asks_again(case, monkeypatch, tmp_path):
    """The helper lies outside the script's folder, on PYTHONPATH: the key of the script's folder cannot see it, the
    files the check imported can."""
    folder, cfg = case
    run_dir, marker = str(folder / "run"), folder.parent / "marker"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper.py").write_text(HELPER)
    os.remove(folder / "user" / "helper.py")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    assert parser_verdict(cfg, run_dir) == [] and marker.read_text() == "ran\n"
    assert parser_verdict(cfg, run_dir) == [] and marker.read_text() == "ran\n"  # kept
    (tmp_path / "lib" / "helper.py").write_text(HELPER.replace(' = "data/train.jsonl"', ""))  # now required
    refused = parser_verdict(cfg, run_dir)
    assert marker.read_text() == "ran\nran\n"
    assert len(refused) == 1 and "the following arguments are required: --data_file/--data-file" in refused[0]
