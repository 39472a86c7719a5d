"""The `trl-ds` command and the pipeline behind `trl-ds run`: compose, check, build, write the run dir."""
