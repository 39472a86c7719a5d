"""`trl-ds export --dir DIR [--auto] [overrides ...]`: the config files of a run, without the run.

Writes ds_config.json, trainer.yaml and accelerate.yaml into DIR for people who keep their own scripts:

    trl-ds export --dir my_setup zero=stage3 cluster=1x8 model.name_or_path=Qwen/Qwen2.5-0.5B
    accelerate launch --config_file my_setup/accelerate.yaml my_train.py

`--auto` writes the "auto" flavour of ds_config.json that Hugging Face's Trainer fills from its own arguments.
"""
import argparse
import os
import sys
from typing import List, Optional

from trl_ds.config.compose import compose
from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.rundir.layout import ACCELERATE_YAML, DS_CONFIG, TRAINER_YAML

FILES = (DS_CONFIG, TRAINER_YAML, ACCELERATE_YAML)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trl-ds export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="folder to write the three files into (created if missing)")
    parser.add_argument("--auto", action="store_true", help='write "auto" where Hugging Face scripts fill values')
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for python -m trl_ds, your files "
                        "included: deepspeed.from_file=, launcher.from_accelerate=, trainer.from_trl_config=, script=")
    return parser.parse_args(argv)


def export(folder: str, overrides: List[str], auto: bool):
    """Validate as for a dry run, then write the files; returns their paths and the config."""
    from trl_ds.cli.app import build
    from trl_ds.rundir.interop import auto_ds_config, write_interop_files

    folder = os.path.abspath(folder)
    cfg = compose(overrides)
    prepared = build(cfg, folder, launching=False, command_line=overrides)
    ds_config = auto_ds_config(prepared.ds_config) if auto else prepared.ds_config
    os.makedirs(folder, exist_ok=True)
    write_interop_files(cfg, folder, ds_config, prepared.trainer_args)
    return [os.path.join(folder, name) for name in FILES], cfg


def built_in_notes(cfg) -> List[str]:
    """The tiny model and data exist only inside a trl_ds run dir; trainer.yaml points where a run would put them."""
    notes = []
    if not cfg.model.name_or_path:
        notes.append("model.name_or_path=... (the tiny model is built by trl_ds runs only)")
    if cfg.trainer.dataset_name == "tiny":
        notes.append("trainer.dataset_name=... (the tiny dataset is written by trl_ds runs only)")
    return notes


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        paths, cfg = export(args.dir, args.overrides, args.auto)
    except ConfigError as err:
        print(f"trl-ds export: {err.render()}", file=sys.stderr)
        return EXIT_USER_ERROR
    print("trl-ds export wrote:\n" + "\n".join(f"  {p}" for p in paths))
    notes = built_in_notes(cfg)
    if notes:
        print("for your own scripts, also set: " + "; ".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
