"""DeepSpeed hostfiles: every mistake is one clear message naming the file and line, before anything spawns."""
import pytest

from tests.conftest import REPO, run_app
from trl_ds.check.validate import validate
from trl_ds.errors import ConfigError
from trl_ds.launch.hostfile import (
    Host,
    check_against_cluster,
    default_hosts,
    parse_hostfile,
    render_hostfile,
    select_slots,
)

SRC = "hosts.txt"


def parse(text):
    return parse_hostfile(text.splitlines(), SRC)


def test_parses_hosts_skipping_comments_and_blank_lines():
    hosts, problems = parse("# my nodes\n\nnode-0 slots=8   # the main node\n  node-1   slots=8\n")
    assert problems == []
    assert hosts == [Host("node-0", 8, 3), Host("node-1", 8, 4)]


@pytest.mark.parametrize("line, message", [
    ("node-0 slot=8", r"hosts.txt line 2: 'node-0 slot=8' is not `HOST slots=N`"),
    ("node-0", r"hosts.txt line 2: 'node-0' is not `HOST slots=N`"),
    ("node-0 slots=8 extra", r"line 2: 'node-0 slots=8 extra' is not `HOST slots=N`"),
    ("node-0 slots=0", r"hosts.txt line 2: slots=0 must be a whole number of at least 1"),
    ("node-0 slots=eight", r"hosts.txt line 2: slots=eight must be a whole number"),
    ("node;reboot slots=8", r"hosts.txt line 2: 'node;reboot' is not a host name"),
    ("$(touch${IFS}x) slots=8", r"line 2: '\$\(touch\$\{IFS\}x\)' is not a host name"),
    ("`id` slots=8", r"line 2: '`id`' is not a host name"),
    ("'node-0' slots=8", r"line 2: \"'node-0'\" is not a host name"),
])
def test_bad_line_names_the_line(line, message):
    _, problems = parse(f"node-9 slots=8\n{line}\n")
    with pytest.raises(ConfigError, match=message):
        raise ConfigError(problems)
    assert len(problems) == 1


def test_duplicate_host_names_both_lines():
    _, problems = parse("node-0 slots=8\nnode-1 slots=8\nnode-0 slots=8\n")
    assert problems == ["hosts.txt line 3: host node-0 is listed again (first on line 1). List each host once, "
                        "with all its slots."]


def test_every_bad_line_is_reported_at_once():
    _, problems = parse("a slots=1\nb slot=1\nc;d slots=1\na slots=1\n")
    assert [p.split(":")[0] for p in problems] == ["hosts.txt line 2", "hosts.txt line 3", "hosts.txt line 4"]


def test_empty_hostfile():
    _, problems = parse("# nothing here\n\n")
    assert problems == ["hosts.txt lists no hosts. Add one `HOST slots=N` line per node, e.g. `node-0 slots=8`."]


def test_slots_must_match_gpus_per_node_naming_the_line():
    hosts, _ = parse("node-0 slots=8\nnode-1 slots=4\n")
    selected, _ = select_slots(hosts, "", "", SRC)
    assert check_against_cluster(hosts, selected, nodes=2, gpus_per_node=8, source=SRC) == [
        "hosts.txt line 2: node-1 gives 4 slot(s) but cluster.gpus_per_node=8. Set slots=8 on that line, "
        "cluster.gpus_per_node=4, or pick slots with launcher.include.",
        "hosts.txt gives 12 slot(s) in all (node-0 8 + node-1 4) but the cluster has 16 ranks (cluster.nodes=2 × "
        "cluster.gpus_per_node=8)."]


def test_host_count_must_match_nodes():
    hosts, _ = parse("node-0 slots=8\nnode-1 slots=8\nnode-2 slots=8\n")
    selected, _ = select_slots(hosts, "", "", SRC)
    problems = check_against_cluster(hosts, selected, nodes=2, gpus_per_node=8, source=SRC)
    assert problems == ["hosts.txt gives 3 host(s) (node-0, node-1, node-2) but cluster.nodes=2. Set "
                        "cluster.nodes=3, or list 2 host(s) (launcher.include/exclude pick some).",
                        "hosts.txt gives 24 slot(s) in all (node-0 8 + node-1 8 + node-2 8) but the cluster has 16 "
                        "ranks (cluster.nodes=2 × cluster.gpus_per_node=8)."]


def test_include_and_exclude_select_hosts_and_slots_like_deepspeed():
    hosts, _ = parse("node-0 slots=4\nnode-1 slots=4\nnode-2 slots=4\n")
    assert select_slots(hosts, "node-0@node-2:1,3", "", SRC) == ({"node-0": [0, 1, 2, 3], "node-2": [1, 3]}, [])
    assert select_slots(hosts, "", "node-1@node-2:0", SRC) == ({"node-0": [0, 1, 2, 3], "node-2": [1, 2, 3]}, [])


def test_filter_mistakes():
    hosts, _ = parse("node-0 slots=4\nnode-1 slots=4\n")
    assert select_slots(hosts, "node-7", "", SRC)[1] == [
        "launcher.include=node-7 names host node-7, which hosts.txt does not list (it lists node-0, node-1)."]
    assert select_slots(hosts, "node-1:9", "", SRC)[1] == [
        "launcher.include=node-1:9 names node-1:9, but hosts.txt has no such slot (node-1 has slots 0..3)."]
    assert "is not HOST or HOST:SLOT" in select_slots(hosts, "", "node-1:x", SRC)[1][0]
    assert "cannot both be set" in select_slots(hosts, "node-0", "node-1", SRC)[1][0]


def test_filters_feed_the_cluster_check():
    hosts, _ = parse("node-0 slots=8\nnode-1 slots=8\nnode-2 slots=8\n")
    selected, problems = select_slots(hosts, "", "node-2", SRC)
    assert problems == [] and check_against_cluster(hosts, selected, 2, 8, SRC) == []


def test_default_and_rendered_hostfile_round_trip():
    hosts = default_hosts(2, 8)
    text = render_hostfile(hosts, "cluster=2x8\nnode-9 slots=1")  # a line break in the origin stays a comment
    assert parse_hostfile(text.splitlines(), "x")[0] == [Host("node-0", 8, 2), Host("node-1", 8, 3)]
    assert default_hosts(1, 2) == [Host("localhost", 2, 1)]


def test_validate_reads_the_hostfile_and_reports_every_problem(compose_cfg, tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text("node-0 slots=8\nnode-1 slots=8\nnode-1 slots=8\nnode-2 slot=8\n")
    cfg = compose_cfg(["cluster=2x8", "launcher=deepspeed", f"cluster.hostfile={path}"])
    with pytest.raises(ConfigError) as err:
        validate(cfg, str(tmp_path / "run"), launching=False)
    assert [p.split(":")[0] for p in err.value.problems] == [f"{path} line 3", f"{path} line 4"]


def test_bad_lines_and_cluster_mismatches_are_reported_together(compose_cfg, tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text("node-0 slots=8\nnode-1 slots=4\nnode 2 slots=8\nnode-3 slots=x\n")
    cfg = compose_cfg(["cluster=4x8", "launcher=deepspeed", f"cluster.hostfile={path}"])
    with pytest.raises(ConfigError) as err:
        validate(cfg, str(tmp_path / "run"), launching=False)
    source = f"{path} (its valid lines)"
    assert err.value.problems == [
        f"{path} line 3: 'node 2 slots=8' is not `HOST slots=N`. Write one host per line, e.g. `node-0 slots=8`.",
        f"{path} line 4: slots=x must be a whole number of at least 1, e.g. `node-3 slots=8`.",
        f"{source} line 2: node-1 gives 4 slot(s) but cluster.gpus_per_node=8. Set slots=8 on that line, "
        f"cluster.gpus_per_node=4, or pick slots with launcher.include.",
        f"{source} gives 2 host(s) (node-0, node-1) but cluster.nodes=4. Set cluster.nodes=2, or list 4 host(s) "
        f"(launcher.include/exclude pick some).",
        f"{source} gives 12 slot(s) in all (node-0 8 + node-1 4) but the cluster has 32 ranks (cluster.nodes=4 × "
        f"cluster.gpus_per_node=8)."]


def test_missing_hostfile(compose_cfg, tmp_path):
    cfg = compose_cfg(["cluster=2x8", "launcher=deepspeed", "cluster.hostfile=nowhere/hosts.txt"])
    with pytest.raises(ConfigError, match=r"cluster.hostfile=nowhere/hosts.txt does not exist \(looked for /"):
        validate(cfg, str(tmp_path), launching=False)


def test_shipped_hostfiles_match_their_clusters(compose_cfg, monkeypatch):
    monkeypatch.chdir(REPO)
    for cluster, hostfile in [("local", "local"), ("1x8", "1x8"), ("2x8", "2x8"), ("4x8", "4x8")]:
        cfg = compose_cfg([f"cluster={cluster}", "launcher=deepspeed", f"cluster.hostfile=hostfiles/{hostfile}.txt"])
        validate(cfg, "/tmp/unused", launching=False)


def test_bad_hostfile_exits_2_before_spawning(tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost slots=2\nevil$(touch${IFS}pwned) slots=2\n")
    run_dir = tmp_path / "run"
    out = run_app(["launcher=deepspeed", f"cluster.hostfile={hosts}"], run_dir, timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"{hosts} line 2: 'evil$(touch${{IFS}}pwned)' is not a host name" in out.stderr
    assert not (run_dir / "launch.sh").exists() and not (REPO / "pwned").exists()
