"""launcher=slurm with a container (pyxis/enroot): the srun line that uses it, and the mistakes refused by name."""
import subprocess

from trl_ds.launch.launchers import launcher_checks
from trl_ds.launch.slurm import check_slurm, render_sbatch

IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"
# quoted for Hydra's override grammar, which reads # otherwise
SLURM = ["cluster=2x8", "launcher=slurm", "launcher.slurm.submit=false", f"launcher.slurm.container_image='{IMAGE}'"]


def test_srun_runs_every_node_in_the_image_with_the_run_dir_mounted(compose_cfg, tmp_path):
    cfg = compose_cfg([*SLURM, "launcher.slurm.container_mounts=['/data:/data:ro','/scratch:/mnt/scratch']"])
    run_dir = str(tmp_path / "run")
    script = render_sbatch(cfg, run_dir)
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    # pyxis's options, as `srun --help` lists them with the plugin: the run dir first, at its own path
    assert srun == (f"srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --container-image='{IMAGE}' "
                    f"--container-mounts={run_dir}:{run_dir},/data:/data:ro,/scratch:/mnt/scratch "
                    f'bash "$RUN_DIR/launch.sh" || STATUS=$?')
    (tmp_path / "sbatch.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "sbatch.sh")]).returncode == 0
    assert check_slurm(cfg) + launcher_checks(cfg) == []  # submit=false: written here, checked where it is submitted


def test_without_an_image_the_srun_line_is_unchanged(compose_cfg, tmp_path):
    script = render_sbatch(compose_cfg(["cluster=2x8", "launcher=slurm"]), str(tmp_path))
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert srun == 'srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 bash "$RUN_DIR/launch.sh" || STATUS=$?'


def test_container_mistakes_are_named(compose_cfg):
    cfg = compose_cfg([*SLURM, "launcher.slurm.container_mounts=['data:/data','/a,/b:/c']"])
    assert check_slurm(cfg) == [
        "launcher.slurm.container_mounts[0]='data:/data' is not HOST_PATH:CONTAINER_PATH[:FLAGS] with absolute paths "
        "and no comma. Write it as pyxis reads it, e.g. /data:/data:ro.",
        "launcher.slurm.container_mounts[1]='/a,/b:/c' is not HOST_PATH:CONTAINER_PATH[:FLAGS] with absolute paths "
        "and no comma. Write it as pyxis reads it, e.g. /data:/data:ro."]
    other = compose_cfg(["cluster=2x8", f"launcher.slurm.container_image='{IMAGE}'"])
    assert check_slurm(other) + launcher_checks(other) == [
        "launcher.slurm.container_image and container_mounts are read by launcher=slurm only (launcher=torchrun "
        "here). Use launcher=slurm, or drop them."]
