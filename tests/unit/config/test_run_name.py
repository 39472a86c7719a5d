"""Every command that names no hydra.run.dir gets a run dir of its own, however fast commands follow each other."""
import re

from trl_ds.config.run_name import run_name

NAME = re.compile(r"^\d{4}-\d{2}-\d{2}/\d{2}-\d{2}-\d{2}\.\d{3}-[0-9a-f]{4}$")


def test_names_are_unique_within_a_millisecond_and_sort_by_time():
    names = [run_name() for _ in range(200)]  # far more than one per millisecond
    assert len(set(names)) == 200 and all(NAME.match(n) for n in names)
    stamps = [n.rsplit("-", 1)[0] for n in names]
    assert stamps == sorted(stamps)
