"""The launcher is chosen in one place: launch/launchers.py's registry. Every other module asks its entry what it does
(submits, over ssh, its checks), so a new launcher is one entry there and no string comparison elsewhere."""
import ast
from pathlib import Path

from trl_ds.config.schema import LauncherName
from trl_ds.launch.launchers import LAUNCHERS

PACKAGE = Path(__file__).resolve().parents[3] / "trl_ds"
REGISTRY = PACKAGE / "launch" / "launchers.py"


def reads_launcher_name(node: ast.AST, aliases=frozenset()) -> bool:
    """`cfg.launcher.name`, `launcher.name`, value(...) of either, or a local name assigned one of those."""
    if isinstance(node, ast.Call) and node.args:
        return reads_launcher_name(node.args[0], aliases)
    if isinstance(node, ast.Name):
        return node.id in aliases
    owner = node.value if isinstance(node, ast.Attribute) and node.attr == "name" else None
    return (isinstance(owner, ast.Attribute) and owner.attr == "launcher") or \
        (isinstance(owner, ast.Name) and owner.id == "launcher")


def is_string(node: ast.AST) -> bool:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(is_string(e) for e in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def name_comparisons(path: Path):
    """Lines comparing the launcher's name (or a variable holding it) with a string: ==, !=, in, not in."""
    tree = ast.parse(path.read_text())
    aliases = frozenset(target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                        and reads_launcher_name(node.value) for target in node.targets if isinstance(target, ast.Name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(reads_launcher_name(s, aliases) for s in sides) and any(is_string(s) for s in sides):
                yield node.lineno


def test_no_module_outside_the_registry_compares_the_launcher_name_with_a_string():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if path != REGISTRY for line in name_comparisons(path)]
    assert found == []


def test_the_check_sees_a_comparison(tmp_path):
    """The AST walk finds the forms the registry replaced (a guard against a check that never fires)."""
    sample = tmp_path / "sample.py"
    sample.write_text('if value(cfg.launcher.name) == "slurm":\n    pass\n'
                      'ok = launcher.name != "deepspeed"\nx = value(cfg.launcher.name) in ("torchrun", "slurm")\n'
                      'name = value(cfg.launcher.name)\nif name == "slurm":\n    pass\n'
                      'if value(cfg.launcher.multinode_runner) == "slurm":\n    pass\n')
    assert sorted(name_comparisons(sample)) == [1, 3, 4, 6]


def test_every_schema_launcher_has_one_entry():
    assert sorted(LAUNCHERS) == sorted(m.value for m in LauncherName)
