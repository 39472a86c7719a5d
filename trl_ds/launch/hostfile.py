"""DeepSpeed hostfiles (`HOST slots=N` lines): parse, filter with --include/--exclude, check against the cluster.

Every problem names the file and line, so a bad hostfile stops the launch before ssh or any rank starts.
"""
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

LINE = re.compile(r"^(?P<host>\S+)\s+slots=(?P<slots>\S+)$")
# What DNS and /etc/hosts allow; anything else (spaces, quotes, ;, $) cannot be a host and must not reach a shell.
HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Host:
    name: str
    slots: int
    line: int  # 1-based line in the hostfile


def parse_hostfile(lines: List[str], source: str) -> Tuple[List[Host], List[str]]:
    """Hosts in file order, and one problem per bad line; comments (#) and blank lines are skipped."""
    hosts: List[Host] = []
    problems: List[str] = []
    first_line: Dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        host, problem = _parse_line(text, f"{source} line {number}")
        if problem:
            problems.append(problem)
        elif host.name in first_line:
            problems.append(f"{source} line {number}: host {host.name} is listed again (first on line "
                            f"{first_line[host.name]}). List each host once, with all its slots.")
        else:
            first_line[host.name] = number
            hosts.append(Host(host.name, host.slots, number))
    if not hosts and not problems:
        problems.append(f"{source} lists no hosts. Add one `HOST slots=N` line per node, e.g. `node-0 slots=8`.")
    return hosts, problems


def _parse_line(text: str, where: str) -> Tuple[Optional[Host], Optional[str]]:
    match = LINE.match(text)
    if not match:
        return None, (f"{where}: {text!r} is not `HOST slots=N`. Write one host per line, e.g. `node-0 slots=8`.")
    name, slots = match["host"], match["slots"]
    if not HOST_NAME.match(name):
        return None, (f"{where}: {name!r} is not a host name (letters, digits, '.', '-' and '_' only). "
                      f"Fix the host name on that line.")
    if not slots.isdigit() or int(slots) < 1:
        return None, f"{where}: slots={slots} must be a whole number of at least 1, e.g. `{name} slots=8`."
    return Host(name, int(slots), 0), None


def parse_filter(text: str, option: str) -> Tuple[Dict[str, List[int]], List[str]]:
    """DeepSpeed's NODE_SPEC[@NODE_SPEC...], NODE_SPEC = HOST[:SLOT[,SLOT...]]; [] means every slot of HOST."""
    wanted: Dict[str, List[int]] = {}
    for spec in filter(None, text.split("@")):
        name, _, slots = spec.partition(":")
        numbers = [s for s in slots.split(",") if s] if slots else []
        if not HOST_NAME.match(name) or not all(s.isdigit() for s in numbers):
            return {}, [f"{option}={text} has {spec!r}, which is not HOST or HOST:SLOT[,SLOT...]. "
                        f"Write e.g. {option}=node-0@node-1:0,1."]
        wanted.setdefault(name, [])
        wanted[name] += [int(s) for s in numbers]
    return wanted, []


def select_slots(hosts: List[Host], include: str, exclude: str, source: str) -> Tuple[Dict[str, List[int]], List[str]]:
    """The slots each host contributes after --include/--exclude (the hostfile's order, emptied hosts dropped)."""
    pool = {h.name: list(range(h.slots)) for h in hosts}
    if include and exclude:
        return pool, [f"launcher.include={include} and launcher.exclude={exclude} cannot both be set (DeepSpeed "
                      f"takes one). Keep one, e.g. launcher.exclude=''."]
    option, text = ("launcher.include", include) if include else ("launcher.exclude", exclude)
    if not text:
        return pool, []
    wanted, problems = parse_filter(text, option)
    problems += [f"{option}={text} names {name}:{slot}, but {source} has no such slot "
                 f"({name} has slots {_slot_range(pool.get(name))})."
                 for name, slots in wanted.items() for slot in slots if slot not in pool.get(name, [])]
    problems += [f"{option}={text} names host {name}, which {source} does not list (it lists "
                 f"{', '.join(pool)})." for name in wanted if name not in pool]
    if problems:
        return pool, problems
    if include:
        chosen = {n: (wanted[n] and sorted(set(wanted[n]))) or pool[n] for n in pool if n in wanted}
    else:
        chosen = {n: [] if n in wanted and not wanted[n] else [s for s in pool[n] if s not in wanted.get(n, [])]
                  for n in pool}
    return {n: s for n, s in chosen.items() if s}, []


def _slot_range(slots: Optional[List[int]]) -> str:
    return f"0..{len(slots) - 1}" if slots else "none"


def check_against_cluster(hosts: List[Host], selected: Dict[str, List[int]], nodes: int, gpus_per_node: int,
                          source: str) -> List[str]:
    """One host per node, gpus_per_node slots on each (after include/exclude)."""
    line_of = {h.name: h.line for h in hosts}
    problems = [f"{source} line {line_of[name]}: {name} gives {len(slots)} slot(s) but cluster.gpus_per_node="
                f"{gpus_per_node}. Set slots={gpus_per_node} on that line, cluster.gpus_per_node={len(slots)}, "
                f"or pick slots with launcher.include."
                for name, slots in selected.items() if len(slots) != gpus_per_node]
    if len(selected) != nodes:
        problems.append(f"{source} gives {len(selected)} host(s) ({', '.join(selected) or 'none'}) but "
                        f"cluster.nodes={nodes}. Set cluster.nodes={len(selected)}, or list {nodes} host(s) "
                        f"(launcher.include/exclude pick some).")
    total = sum(len(slots) for slots in selected.values())
    if total != nodes * gpus_per_node:
        parts = " + ".join(f"{name} {len(slots)}" for name, slots in selected.items()) or "none"
        problems.append(f"{source} gives {total} slot(s) in all ({parts}) but the cluster has {nodes * gpus_per_node} "
                        f"ranks (cluster.nodes={nodes} × cluster.gpus_per_node={gpus_per_node}).")
    return problems


def default_hosts(nodes: int, gpus_per_node: int) -> List[Host]:
    """The hostfile written when cluster.hostfile is null: localhost alone, or the presets' node-0..node-N-1."""
    names = ["localhost"] if nodes == 1 else [f"node-{i}" for i in range(nodes)]
    return [Host(name, gpus_per_node, i + 1) for i, name in enumerate(names)]


def read_hostfile(path: str) -> Tuple[List[Host], List[str]]:
    """Hosts from a file (relative paths from the launch folder), or the problem that stops the launch."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        return [], [f"cluster.hostfile={path} does not exist (looked for {full}). Give a file of `HOST slots=N` "
                    f"lines, e.g. cluster.hostfile=hostfiles/2x8.txt, or cluster.hostfile=null to generate one."]
    with open(full) as f:
        return parse_hostfile(f.read().splitlines(), path)


def render_hostfile(hosts: List[Host], origin: str) -> str:
    one_line = origin.replace("\r", " ").replace("\n", " ")
    lines = [f"# Generated by trl_ds from {one_line}. DeepSpeed's format: one `HOST slots=N` line per node."]
    return "\n".join(lines + [f"{h.name} slots={h.slots}" for h in hosts]) + "\n"
