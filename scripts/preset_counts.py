"""Write trl_ds/plan/preset_counts.json: the meta-device count of every preset in conf/model/, shipped so that a
preset plans without importing torch. Run it after adding or changing a preset, or moving to another transformers:

    .venv/bin/python scripts/preset_counts.py

tests/unit/plan/test_params.py checks that the file holds exactly the presets, each equal to a meta-device build.
"""
import glob
import json
import os
import sys
import tempfile
from importlib.metadata import version

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def preset_names():
    return sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(REPO, "conf/model/*.yaml")))


def main() -> int:
    os.environ["TRL_DS_CACHE"] = tempfile.mkdtemp()  # count afresh, never from a cache
    from trl_ds.config.compose import compose
    from trl_ds.config.model_source import preset_config
    from trl_ds.plan import count_cache, params

    count_cache.SHIPPED = os.devnull
    entries = {}
    for name in preset_names():
        key = json.dumps(preset_config(compose([f"model={name}"]).model), sort_keys=True)
        entries[key] = {k: v for k, v in params.entry(key).items() if k != "config_json"}
        print(f"{name}: {params.count_params(params.from_config(json.loads(key), name)).total:,} parameters")
    count_cache.SHIPPED = os.path.join(REPO, "trl_ds", "plan", "preset_counts.json")
    count_cache.write_shipped(entries, version("transformers"))
    print(f"wrote {count_cache.SHIPPED} ({os.path.getsize(count_cache.SHIPPED):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
