"""What every family counted by hand (trl_ds/plan/by_hand/) is held to: a meta-device build of the same config."""
import json

from trl_ds.plan.params import count_params, from_config, layout


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
