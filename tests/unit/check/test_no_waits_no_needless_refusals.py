"""#61 item 6: waits and refusals nothing needs.

Offline, a Hub model that is not cached was answered after huggingface_hub's five retries (about 23 s); now one TCP
connect to the Hub's endpoint (here 127.0.0.1:9, the discard port, where nothing listens) answers at once, naming
model.name_or_path= a folder. open-r1's recipes keep `per_device_eval_batch_size: 16` with `do_eval: false` and no
eval_strategy (huggingface/open-r1 recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml, tests/data/imported/): TRL
takes and ignores it, so it is a printed note, not the refusal "nothing would evaluate"."""
import pytest
from conftest import REPO
from huggingface_hub import constants

from trl_ds.check.plan_rows import config_problems
from trl_ds.check.resolve import resolve
from trl_ds.check.trainer_rules import eval_notes
from trl_ds.cli.plan import main as plan_main

NOT_CACHED = "nobody-here/not-cached-model"


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    for proxy in ("HTTPS_PROXY", "https_proxy", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(proxy, raising=False)


@pytest.mark.parametrize("given", [[f"model.name_or_path={NOT_CACHED}"], ["trainer.from_trl_config={recipe}"]])
def test_a_hub_model_not_cached_is_answered_at_once_offline(given, offline_hub, tmp_path, capsys, monkeypatch):
    import huggingface_hub

    def asked(*args, **kwargs):
        raise AssertionError("the Hub was asked, with its retries")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", asked)
    (tmp_path / "recipe.yaml").write_text(f"model_name_or_path: {NOT_CACHED}\nlearning_rate: 2.0e-05\n")
    assert plan_main([g.format(recipe=tmp_path / "recipe.yaml") for g in given]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trl-ds plan: model.name_or_path={NOT_CACHED}: its config.json is not in the Hugging Face "
                          f"cache and the Hub cannot be reached (127.0.0.1:9: ")
    assert "give a folder written by save_pretrained (model.name_or_path=/path/to/model)" in err


@pytest.mark.parametrize("recipe,size", [("open_r1_qwen2.5_1.5b_grpo_config_demo.yaml", 16),
                                         ("open_r1_distill_7b_sft_config_distill.yaml", 1)])
def test_open_r1s_eval_batch_with_evaluation_off_is_a_note(recipe, size):
    """open-r1's own recipes (tests/data/imported/, their other refusals unrelated to evaluation)."""
    run = resolve([f"trainer.from_trl_config={REPO}/tests/data/imported/{recipe}", "cluster=1x8"])
    refusals = run.problems + config_problems(run.cfg)
    assert not [p for p in refusals if "eval" in p], refusals
    assert eval_notes(run.cfg) == [f"trainer.per_device_eval_batch_size={size} not used: trainer.eval_strategy=no, "
                                   f"nothing evaluates (set trainer.eval_strategy=steps or epoch to evaluate)."]


def test_eval_data_named_with_evaluation_off_is_still_refused(compose_cfg):
    """Data named for an evaluation that never runs is a misread, not a harmless setting."""
    problems = config_problems(compose_cfg(["trainer.eval_dataset_name=b.jsonl"]))
    assert problems == ["trainer.eval_dataset_name=b.jsonl with trainer.eval_strategy=no: nothing would evaluate. "
                        "Set trainer.eval_strategy=steps or epoch."]
