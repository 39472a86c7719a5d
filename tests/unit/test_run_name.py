"""Every command that names no hydra.run.dir gets a run dir of its own, however fast commands follow each other."""
import os
import re
import subprocess
import sys

from tests.conftest import REPO
from trl_ds.config.run_name import run_name

NAME = re.compile(r"^\d{4}-\d{2}-\d{2}/\d{2}-\d{2}-\d{2}\.\d{3}-[0-9a-f]{4}$")


def test_names_are_unique_within_a_millisecond_and_sort_by_time():
    names = [run_name() for _ in range(200)]  # far more than one per millisecond
    assert len(set(names)) == 200 and all(NAME.match(n) for n in names)
    stamps = [n.rsplit("-", 1)[0] for n in names]
    assert stamps == sorted(stamps)


def test_three_dry_runs_in_a_row_get_three_run_dirs(tmp_path):
    """The README's loop over configs: each dry run takes well under a second."""
    loop = (f"for z in stage1 stage2 stage3; do {sys.executable} -m trl_ds zero=$z dry_run=true || exit 1; done")
    out = subprocess.run(["bash", "-c", loop], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert out.returncode == 0, out.stderr
    run_dirs = sorted(p.parent for p in tmp_path.glob("outputs/*/*/config.yaml"))
    assert len(run_dirs) == 3
    stages = [re.search(r"^  stage: (\d)$", (d / "config.yaml").read_text(), re.M).group(1) for d in run_dirs]
    assert stages == ["1", "2", "3"]  # sorted by name = in the order they ran
