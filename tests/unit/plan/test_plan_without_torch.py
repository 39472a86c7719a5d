"""Every shipped preset plans without importing torch or transformers, even with an empty count cache: their
meta-device counts ship with the package (trl_ds/plan/preset_counts.json). Any other config is built on the meta
device on its first plan (tests/integration/test_count_cache.py: the second reads the count back without torch)."""
import glob
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

# a whole command per preset, in a fresh interpreter: make test runs it, make test-fast leaves it out
pytestmark = pytest.mark.slow

PRESETS = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(str(REPO / "conf/model/*.yaml")))
PLAN = ("import json, sys; from trl_ds.cli.plan import main\n"
        "for name in sys.argv[1:]:\n"
        "    main([f'model={name}', 'cluster=1x8', '--json'])\n"
        "print(json.dumps(['torch' in sys.modules, 'transformers' in sys.modules]), file=sys.stderr)\n")


def test_every_preset_plans_without_torch_from_an_empty_cache(tmp_path):
    out = subprocess.run([sys.executable, "-c", PLAN, *PRESETS], cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=True, env={**os.environ, "TRL_DS_CACHE": str(tmp_path / "cache")})
    assert json.loads(out.stderr.splitlines()[-1]) == [False, False]
    assert not (tmp_path / "cache" / "counts").exists()  # nothing counted, nothing kept
    decoder = json.JSONDecoder()
    plans, text = [], out.stdout.strip()
    while text:
        plan, end = decoder.raw_decode(text)
        plans.append(plan)
        text = text[end:].strip()
    # the model cards' safetensors totals (as tests/unit/plan/test_params.py)
    totals = {p["model"]: p["parameters"] for p in plans}
    assert len(plans) == len(PRESETS)
    assert (totals["llama3-70b"], totals["mixtral-8x7b"], totals["qwen3-30b-a3b"], totals["tiny"]) == (
        70_553_706_496, 46_702_792_704, 30_532_122_624, 869_504)
