"""A config that is not a preset is built on the meta device once per config (imports torch); its count is
kept by config hash, and later plans of the same config read it back without torch, exact to the parameter."""
import json
import os
import sys

import pytest
from conftest import run_waiting
from transformers import AutoConfig
from unit.plan.test_model_families import instantiate, meta_counts, write_config

# Plans in fresh interpreters (the point is what they import): not for make test-fast; make test runs them beside the
# unit tests
pytestmark = [pytest.mark.integration, pytest.mark.light]

RAW = {"model_type": "flint", "vocab_size": 3000, "hidden_size": 128, "intermediate_size": 256,
       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "num_experts": 4,
       "num_experts_per_tok": 2, "hidden_act": "prelu"}
# prelu: an activation holding a tensor
PLAN = ("import sys; from trl_ds.cli.plan import main; main(['model.name_or_path={folder}', 'cluster=1x1', "
        "'--json']); print('torch' in sys.modules, file=sys.stderr)")


def plan(folder, cache):
    env = {**os.environ, "TRL_DS_CACHE": str(cache)}
    out = run_waiting([sys.executable, "-c", PLAN.format(folder=folder)], text=True, waited_s=120, check=True,
                      env=env)  # a bound on waiting, not on wall time (conftest.run_waiting)
    return json.loads(out.stdout), out.stderr.split()[-1] == "True"


def test_the_second_plan_of_a_meta_family_reads_its_count_back_without_torch(tmp_path):
    folder, cache = write_config(tmp_path / "flint", RAW), tmp_path / "cache"
    total, largest, _ = meta_counts(instantiate(AutoConfig.for_model(**RAW)))
    first, first_torch = plan(folder, cache)
    assert first_torch and len(os.listdir(cache / "counts")) == 1
    second, second_torch = plan(folder, cache)
    assert not second_torch
    assert first["parameters"] == second["parameters"] == total
    assert first["largest_module"] == second["largest_module"] == largest
    assert first["rows"] == second["rows"]  # the same estimate, row for row


def test_a_damaged_entry_is_counted_again(tmp_path):
    folder, cache = write_config(tmp_path / "flint", RAW), tmp_path / "cache"
    plan(folder, cache)
    (entry,) = (cache / "counts").iterdir()
    entry.write_text("{not json")
    again, torch_loaded = plan(folder, cache)
    assert torch_loaded and again["parameters"] == meta_counts(instantiate(AutoConfig.for_model(**RAW)))[0]
    assert json.loads(entry.read_text())["architecture"]["model_type"] == "flint"
