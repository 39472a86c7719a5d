"""Which rank failed first of its own accord, whatever order the launchers logged the exits in.

When one rank ends, its peers fail too on losing it, and their launchers log those exits as well, often in the same
millisecond. Every launcher path hands its ranks' exits here in the order it logged them; one rule picks the rank."""
import re
import signal
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from trl_ds.errors import EXIT_USER_ERROR

# What a rank's last error says when it only noticed that a peer left the process group (gloo over TCP).
PEER_LEFT = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|DistBackendError|"
                       r"Socket Timeout|recvBytes|ProcessGroupGloo", re.I)
# A Python exception line, as a rank's log ends with it ("[rank1]: RuntimeError: ...").
EXCEPTION_LINE = re.compile(r"^(?:\[rank(\d+)\]:\s*)?((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b.*)$")
# The peer gloo lost: "Read error [10.88.0.2]:29881: Connection reset by peer"
PEER_ADDRESS = re.compile(r"\[([\w.:-]+)\]:\d+")


@dataclass
class RankExit:
    rank: int
    code: int  # its exit code; negative: the signal that ended it
    where: str  # "node 1, host 10.88.0.2, local rank 0"
    log: Optional[str]  # its own log, or (shared) the output every rank's lines went to
    shared: bool = False  # the log holds every rank's output, each error line tagged "[rankN]:" (mpirun)
    ended_by_launcher: bool = False  # a signal its launcher sent once another rank had failed (torchrun)

    def error(self, limit: Optional[int] = 300) -> Optional[str]:
        return last_error(self.log, self.rank if self.shared else None, limit)

    def lost_a_peer(self) -> bool:
        """It failed only because another rank left: its error says so, or its launcher ended it after another."""
        error = self.error()
        return bool(PEER_LEFT.search(error)) if error else self.ended_by_launcher


def last_error(log: Optional[str], rank: Optional[int] = None, limit: Optional[int] = 300) -> Optional[str]:
    """The last exception line of a rank's log (of rank `rank`'s tagged lines in a shared one), at most `limit`
    chars (None: whole)."""
    try:
        with open(log or "", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = [m.group(2) for m in map(EXCEPTION_LINE.match, lines)
             if m and (rank is None or m.group(1) == str(rank))]
    return found[-1][:limit] if found else None


def first_own(exits: Sequence[RankExit]) -> Tuple[RankExit, List[RankExit]]:
    """The first rank, in the order given, that failed of its own accord, and the ranks that only lost it. When
    every rank only lost a peer (the one that left first logged nothing), the first of them."""
    lost = [e.lost_a_peer() for e in exits]
    chosen = next((e for e, gone in zip(exits, lost) if not gone), exits[0])
    return chosen, [e for e, gone in zip(exits, lost) if gone and e is not chosen]


def exits_text(exits: Sequence[RankExit], hosts: Sequence[str] = ()) -> Tuple[str, RankExit]:
    """One sentence naming the rank that failed first and the ranks that only lost it; hosts: node ranks' hosts."""
    chosen, lost = first_own(exits)
    where = "its output is in" if chosen.shared else "its log:"
    text = f"rank {chosen.rank} ({chosen.where}) exited with {exit_text(chosen.code)}"
    if chosen.lost_a_peer():
        error = chosen.error() or ""
        said = PEER_LEFT.search(error)
        text += f" on losing a peer{peer_named(error, hosts)}{f' ({said.group(0)})' if said else ''}, and no " \
                f"launcher reported the rank that left first"
    text += f"; {where} {chosen.log}"
    if lost:
        text += "; " + ", ".join(f"rank {e.rank} ({e.where.split(',')[0]})" for e in lost) + \
                f" exited only on losing {'it' if not chosen.lost_a_peer() else 'a peer'}"
    return text, chosen


def refusal(chosen: RankExit) -> Optional[str]:
    """A rank that refused (exit code 2, trl_ds's refusal, with its one line): that line, whole (its fix ends it)."""
    error = chosen.error(limit=None)
    return error if chosen.code == EXIT_USER_ERROR and error and not PEER_LEFT.search(error) else None


def peer_named(error: str, hosts: Sequence[str]) -> str:
    found = PEER_ADDRESS.search(error)
    if not found:
        return ""
    host = found.group(1)
    return f" at {host} (node {list(hosts).index(host)})" if host in hosts else f" at {host}"


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"
