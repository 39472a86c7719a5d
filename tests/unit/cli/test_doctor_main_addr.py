"""How the doctor names the main address it could not resolve: the config's cluster.master_addr, or inside a SLURM
allocation the job's first node, which launch.sh takes from SLURM whatever the config says (so the fix is not an
override). The node's view comes from the real probe of this machine."""
from trl_ds.cli.doctor import _main_addr_problems
from trl_ds.launch.host_checks import probe

UNRESOLVABLE = "no-such-node0.invalid"


def view_of(addr: str) -> dict:
    return probe({"master_addr": addr, "master_port": 29500, "interfaces": [], "versions": False})


def test_outside_slurm_the_config_value_is_named(compose_cfg, monkeypatch):
    monkeypatch.delenv("SLURM_NODEID", raising=False)
    cfg = compose_cfg(["cluster.nodes=2", f"cluster.master_addr={UNRESOLVABLE}"])
    assert _main_addr_problems(cfg, "node 1 (here)", view_of(UNRESOLVABLE), UNRESOLVABLE) == [
        f"node 1 (here): cluster.master_addr={UNRESOLVABLE} does not resolve there. Use node 0's address or a name "
        f"every node resolves, e.g. cluster.master_addr=10.0.0.1."]


def test_in_a_slurm_allocation_the_jobs_first_node_is_named(compose_cfg, monkeypatch):
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "no-such-node[0-1].invalid")
    cfg = compose_cfg(["cluster.nodes=2", "cluster.master_addr=node-0"])
    assert _main_addr_problems(cfg, "node 1 (here)", view_of(UNRESOLVABLE), UNRESOLVABLE) == [
        f"node 1 (here): the main node {UNRESOLVABLE}, the job's first node (from SLURM; cluster.master_addr is not "
        f"used) does not resolve there. The job's nodes must resolve and reach each other (scontrol show node NAME "
        f"gives the address SLURM hands out): ask the cluster's admins, or exclude the node "
        f"(launcher.slurm.extra_sbatch=['--exclude=NODE'])."]
