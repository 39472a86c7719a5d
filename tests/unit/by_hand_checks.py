"""What every family counted by hand (trl_ds/plan/by_hand/) is held to: a meta-device build of the same config; a
config the formulas decline is counted by the meta device instead, and one transformers refuses is one ConfigError."""
import json
import re
from typing import Optional

import pytest

from trl_ds.errors import ConfigError
from trl_ds.plan.params import count_params, from_config, layout

# how transformers' strict dataclasses name a validator that refused the config
CLASS_REFUSES = "StrictDataclassClassValidationError: Class validation error for validator "


def assert_counts_as_the_meta_device_builds_it(raw: dict) -> None:
    """Every module's tensors, the total, active, largest module, embedding and lm_head, and the dimensions the
    estimates read, equal a meta-device build's; and the config as transformers writes it back (save_pretrained's
    config.json: every derived key filled in) counts the same."""
    from transformers import AutoConfig

    from trl_ds.plan.params import meta_architecture, meta_layout

    arch = from_config(raw, "by hand")
    counts, lay = count_params(arch), layout(arch)
    meta = meta_layout(arch.config_json)
    meta_total = sum(map(sum, meta.modules))
    idle = sum(n // experts * (experts - per_token) for n, experts, per_token in meta.routed)
    assert counts.method == "fast"
    assert sorted(map(sorted, lay.modules)) == sorted(map(sorted, meta.modules))
    assert (counts.total, counts.active, counts.largest_module, lay.embedding, lay.lm_head) == (
        meta_total, meta_total - idle, max(map(sum, meta.modules)), meta.embedding, meta.lm_head)
    assert arch == meta_architecture(arch.config_json, "by hand")
    kwargs = {k: v for k, v in raw.items() if k != "model_type"}
    written = json.loads(AutoConfig.for_model(raw["model_type"], **kwargs).to_json_string())
    again = count_params(from_config(written, "written"))
    assert (again.method, again.total, again.active) == ("fast", counts.total, counts.active)


def assert_declined(raw: dict, same_as: Optional[dict] = None):
    """The family's settings() declines `raw` and the meta device counts it: the planner's total is the meta build's;
    and where `same_as` is given (a config the formulas count, whose model `raw` does not change), its total and active
    count. Returns (the planner's counts, the meta layout) for the caller's own checks."""
    from trl_ds.plan.by_hand import family
    from trl_ds.plan.params import meta_layout

    assert family(raw["model_type"]).settings(raw) is None
    arch = from_config(raw, "declined")
    counts, meta = count_params(arch), meta_layout(arch.config_json)
    assert (counts.method, counts.total) == ("meta", sum(map(sum, meta.modules)))
    if same_as is not None:
        plain = count_params(from_config(same_as, "counted"))
        assert (plain.method, plain.total, plain.active) == ("fast", counts.total, counts.active)
    return counts, meta


def assert_refused(raw: dict, said: str) -> None:
    """The planner refuses `raw` with one ConfigError that quotes what transformers (or the build) said: `said`, a
    regular expression for the start of it."""
    with pytest.raises(ConfigError, match=f"model_type '{re.escape(raw['model_type'])}' is not a causal LM that "
                                          f"transformers can build here \\({said}"):
        from_config(raw, "refused")
