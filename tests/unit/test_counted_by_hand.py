"""Every family trl_ds/plan/by_hand/ counts plans without importing torch or transformers: the reason to count by
hand (a meta-device build imports both, about 3 s here). Each family's own test holds its counts to meta-device
builds (tests/unit/test_by_hand_*.py)."""
import json
import subprocess
import sys

import pytest
from conftest import REPO

from trl_ds.plan import by_hand

# the model_types the survey left to the meta device at 7110462 that the planner can plan, and Gemma 4's text models
BY_HAND = ("bailing_hybrid", "dory", "dots3_note_text", "flint", "gemma4_text", "gemma4_unified_text", "hy_v4",
           "inkling2_loop_text", "laguna", "lara_mini", "phi4_multimodal", "reformer", "zamba2", "zaya")
DEFAULTS = {"reformer": {"is_decoder": True}}  # its causal LM refuses the class defaults
COUNT = ("import json, sys\nfrom trl_ds.plan.by_hand import FAMILIES\nfrom trl_ds.plan.params import count_params, "
         "from_config\nraws = {t: {'model_type': t, **json.loads(sys.argv[1]).get(t, {})} for t in sorted(FAMILIES)}\n"
         "print(json.dumps({t: count_params(from_config(raw, 'defaults')).method for t, raw in raws.items()}))\n"
         "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))\n")


@pytest.mark.slow  # a fresh interpreter: make test only
def test_every_family_counted_by_hand_plans_its_defaults_without_torch():
    out = subprocess.run([sys.executable, "-c", COUNT, json.dumps(DEFAULTS)], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    counted, imported = map(json.loads, out.stdout.splitlines())
    assert counted == {t: "fast" for t in BY_HAND}  # each total: the family's test, against the meta device
    assert imported == []


def test_the_registry_names_every_module_of_the_package_for_the_types_it_counts():
    """A module left out of FAMILIES would never count; a type named for the wrong module would count wrong."""
    import pkgutil

    names = {info.name for info in pkgutil.iter_modules(by_hand.__path__)}
    assert set(by_hand.FAMILIES.values()) == names
    assert {t: by_hand.family(t).TYPES for t in BY_HAND} == {t: tuple(
        k for k, v in by_hand.FAMILIES.items() if v == by_hand.FAMILIES[t]) for t in BY_HAND}
    assert sorted(by_hand.FAMILIES) == sorted(BY_HAND)
