"""launcher=slurm with no GPU here and no SLURM answering: the launch is not refused for this machine's GPUs. sinfo
retries a missing slurm.conf for up to a minute, so the check waits its whole timeout (10 s) for real: moved from
tests/unit/test_gpu_count.py, which keeps the local-launch case."""
import pytest

from tests.unit.test_gpu_count import test_no_gpu_here_is_fine_when_the_ranks_run_elsewhere as no_gpu_here

pytestmark = pytest.mark.integration


def test_no_gpu_here_is_fine_when_slurm_runs_the_ranks(compose_cfg, monkeypatch, tmp_path):
    no_gpu_here(compose_cfg, monkeypatch, ["launcher=slurm", "cluster=2x8"], tmp_path)
