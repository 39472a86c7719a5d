"""Words of a launch command that the node's shell expands ("$MAIN_ADDR"): the command builders (torchrun.py,
deepspeed.py) make them, launch.sh (script.py) writes them unquoted."""
from typing import Optional


class Shell(str):
    """A word written verbatim into a script: a variable the node's shell expands, never config data.
    `shown` is its value outside SLURM, for printing commands; `main_addr`, the configured main address a word
    holding $MAIN_ADDR stands for."""

    def __new__(cls, text: str, shown: str, main_addr: Optional[str] = None):
        word = super().__new__(cls, text)
        word.shown, word.main_addr = shown, main_addr
        return word


RUN_DIR_VAR = '"$RUN_DIR"'
LOCAL_ADDR_VAR = '"$LOCAL_ADDR"'


def main_addr_word(master_addr: str, suffix: str = "") -> Shell:
    """The main node's address (then suffix, e.g. ":PORT"): cluster.master_addr, or the job's first node when srun
    starts launch.sh."""
    return Shell(f'"$MAIN_ADDR"{suffix}', shown=master_addr + suffix, main_addr=master_addr)


def local_addr_word() -> Shell:
    """This node's address as the other nodes reach it: $PET_LOCAL_ADDR (torchrun's own variable) if set, else
    the source address of the route to the main node (launch/route.py)."""
    return Shell(LOCAL_ADDR_VAR, shown="<this-node-addr>")
