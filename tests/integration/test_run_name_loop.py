"""The README's loop over configs, three real `python -m trl_ds` processes in a row: each gets its own run dir (moved
from tests/unit/config/test_run_name.py, which keeps the pure name tests)."""
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.light]


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
