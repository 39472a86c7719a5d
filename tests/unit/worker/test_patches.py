"""transformers/TRL are patched in one module (worker/patches.py), torch's op loader in one (op_locks.py), each
only under the versions it was written against; another version is refused in one line, exit code 2."""
import ast
import pathlib

import pytest

from trl_ds import op_locks
from trl_ds.worker import patches

PACKAGE = pathlib.Path(patches.__file__).resolve().parents[1]
THIRD_PARTY = {"transformers", "trl", "torch", "deepspeed", "accelerate", "cpp_extension", "file_baton", "parser",
               "TrlParser", "cls"}


def test_another_transformers_or_trl_is_refused_before_anything_is_patched(capsys):
    with pytest.raises(SystemExit) as done:
        patches.guard("Trainer.train", {"transformers": "5.25.0", "trl": "1.16.0"})
    assert done.value.code == 2
    assert capsys.readouterr().out.strip() == (
        "trl_ds: refusing to patch Trainer.train: written for transformers 5.24.x, this environment has transformers "
        "5.25.0. Install transformers~=5.24.0 (pyproject's pin).")
    patches.guard("Trainer.train", {"transformers": "5.24.3", "trl": "1.16.1"})  # the pinned minors pass


def test_another_torch_is_refused_before_its_op_loader_is_patched(capsys):
    for version, ok in (("2.13.0+cpu", True), ("2.4.1", True), ("2.3.1", False), ("3.0.0", False)):
        if ok:
            op_locks.refuse_other_torch(version, True)
            continue
        with pytest.raises(SystemExit) as done:
            op_locks.refuse_other_torch(version, True)
        assert done.value.code == 2
        assert f"this environment has torch {version}. Install torch>=2.4,<3.0." in capsys.readouterr().err
    with pytest.raises(SystemExit):
        op_locks.refuse_other_torch("2.13.0", False)  # the private functions gone


def test_third_party_classes_are_patched_in_two_modules_only():
    """An assignment to an attribute of a third-party module or class (the names trl_ds's patches use) appears in
    worker/patches.py and op_locks.py only."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            calls = [node] if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setattr" else []
            for target in targets + [c.args[0] for c in calls if c.args]:
                root = target
                while isinstance(root, ast.Attribute):
                    root = root.value
                if target is not root and isinstance(root, ast.Name) and root.id in THIRD_PARTY:
                    found.add(path.relative_to(PACKAGE).as_posix())
    assert found == {"worker/patches.py", "op_locks.py"}
