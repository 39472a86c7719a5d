"""A value that cannot describe the hardware is refused in one line, by the plan and the launch alike (#61: a GPU
cluster's cluster.gpu_memory_gb=-1 was planned "against host RAM (CPU ranks)" and NVMe offload recommended)."""
import pytest

from trl_ds.check.plan_rows import config_problems
from trl_ds.cli.plan import main


@pytest.mark.parametrize("value", ["-1", "0"])
def test_no_gpu_memory_on_a_gpu_cluster_is_refused(value, capsys):
    assert main(["model=llama3-8b", "cluster=1x8", f"cluster.gpu_memory_gb={value}"]) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"trl-ds plan: cluster.gpu_memory_gb={value} cannot be a GPU's memory "
                                      f"(cluster.device=cuda): give GiB per GPU, e.g. cluster.gpu_memory_gb=80, or "
                                      f"cluster.device=cpu for CPU ranks.\n")


def test_the_launch_refuses_it_too_and_cpu_ranks_keep_their_zero(compose_cfg):
    problems = config_problems(compose_cfg(["cluster=1x8", "cluster.gpu_memory_gb=-1", "cluster.cpu_memory_gb=-2"]))
    assert [p.split(" cannot")[0] for p in problems] == ["cluster.gpu_memory_gb=-1", "cluster.cpu_memory_gb=-2"]
    assert config_problems(compose_cfg(["cluster=local"])) == []  # CPU ranks: gpu_memory_gb 0 is the preset's
