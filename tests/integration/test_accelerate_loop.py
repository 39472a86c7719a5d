"""script=: an Accelerator loop of one's own trains through trl_ds (docs/scripts.md, "An Accelerator loop": the block
there is what runs here), and one that builds a torch optimizer against ds_config.json's optimizer block is refused
before launch (accelerate would refuse it on every rank)."""
import re

import pytest
from conftest import REPO, run_app

pytestmark = pytest.mark.integration


def documented_loop() -> str:
    text = (REPO / "docs" / "scripts.md").read_text()
    section = text[text.index("## An Accelerator loop"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_documented_accelerator_loop_trains_through_trl_ds(tmp_path):
    (tmp_path / "loop.py").write_text(documented_loop())
    run_dir = tmp_path / "run"
    out = run_app([f"script={tmp_path / 'loop.py'}", "zero=stage3"], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rank0 = sorted(run_dir.glob("logs/node_0/*/attempt_0/0/stdout.log"))[0].read_text()
    steps = re.findall(r"^step (\d) loss (\d+\.\d{4}) zero stage (\d)$", rank0, re.M)
    assert [(s, z) for s, _, z in steps] == [("1", "3"), ("2", "3"), ("3", "3")]  # the run dir's stage, 3 steps


@pytest.mark.light
def test_an_optimizer_built_in_code_against_the_configs_is_refused_before_launch(tmp_path):
    script = tmp_path / "loop.py"
    loop = documented_loop().replace("from accelerate.utils import DummyOptim\n", "")  # never heard of it
    own = "optimizer = torch.optim.AdamW(model.parameters())\n"
    script.write_text(loop[:loop.index('if "optimizer" in ds:')] + own
                      + loop[loop.index("model, optimizer = accelerator.prepare"):])
    run_dir = tmp_path / "run"
    out = run_app([f"script={script}"], run_dir)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        f"trl_ds: script={script}: it builds its own optimizer (AdamW) for an Accelerator with DeepSpeedPlugin, and "
        f"the run dir's ds_config.json has an optimizer block: accelerate refuses both on every rank. Pass "
        f"accelerate.utils.DummyOptim(params, lr=...) where the config has an optimizer block (docs/scripts.md, "
        f"'An Accelerator loop')."]
    assert not (run_dir / "logs").exists()
