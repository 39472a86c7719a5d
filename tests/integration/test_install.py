"""Installing: `pip install .` (a wheel, not editable) carries the Hydra config tree; `make run` installs no system
package, and a run that needs libaio without it stops before launch."""
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_wheel_install_finds_its_config_tree(tmp_path):
    from conftest import REPO

    target, source = tmp_path / "site", tmp_path / "source"
    # built from a copy of the tracked files: a build in the checkout rewrites its trl_ds.egg-info, which every test
    # running meanwhile sees on sys.path (the parser cache's key lists it)
    for name in subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.split("\0"):
        if name and (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, cwd=tmp_path)
    assert (target / "trl_ds" / "conf" / "zero" / "stage3.yaml").is_file()
    assert (target / "trl_ds" / "plan" / "hardware" / "h100-80gb.yaml").is_file()  # cluster.gpu presets: package data
    assert (target / "bin" / "trl-ds").is_file()  # the console script of [project.scripts]
    out = subprocess.run([sys.executable, "-m", "trl_ds", "zero=stage3", "dry_run=true",
                          f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "trl_ds dry run: 1 node(s) × 2 cpu rank(s)" in out.stdout
    assert str(target / "trl_ds" / "__main__.py") in subprocess.run(
        [sys.executable, "-c", "import trl_ds.__main__ as m; print(m.__file__)"], cwd=tmp_path,
        capture_output=True, text=True, env={"PYTHONPATH": str(target)}).stdout
    plan = subprocess.run([sys.executable, str(target / "bin" / "trl-ds"), "plan", "cluster=1x8", "model=llama3-8b",
                           "cluster.gpu=h100-80gb", "--fits"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("trl_ds plan: llama3-8b (8.03B parameters")


def test_nvme_offload_without_libaio_stops_before_launch(tmp_path):
    """`make run` no longer installs libaio-dev: a run with offload=nvme on a machine without it stops before launch
    with the package to install. The machine without it: this one, with /usr/include hidden under an empty tmpfs in a
    mount namespace of the command's own (unshare -m, as root), so libaio.h is really absent for that process."""
    import shutil

    from conftest import REPO, require

    require(os.geteuid() == 0 and bool(shutil.which("unshare")), "a mount namespace (root, unshare) hides libaio.h")
    run_dir = tmp_path / "run"
    done = subprocess.run(["unshare", "-m", "bash", "-c", 'mount -t tmpfs none /usr/include && exec "$@"', "bash",
                           sys.executable, "-m", "trl_ds", "zero=stage3", "offload=nvme", f"hydra.run.dir={run_dir}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("trl_ds: offload=nvme needs libaio for DeepSpeed's async_io op, and it is not "
                                   "installed here. Install it with: apt-get install -y libaio-dev (or use "
                                   "offload=cpu).")
    assert not run_dir.exists()  # nothing written, nothing spawned


def test_make_run_installs_no_system_package():
    """The path `make run` takes (Makefile's run -> setup -> scripts/setup_env.sh) calls apt-get only for libaio-dev,
    and only with --nvme, which `make run` does not pass; the test-only packages are in scripts/setup_test_env.sh."""
    from conftest import REPO

    makefile = (REPO / "Makefile").read_text()
    assert "\nrun: setup\n" in makefile and "\nsetup:\n\t@bash scripts/setup_env.sh\n" in makefile
    setup = (REPO / "scripts" / "setup_env.sh").read_text()
    code = "\n".join(line for line in setup.splitlines() if not line.lstrip().startswith("#"))
    assert code.count("apt-get update") == 1 and 'if [ "${1:-}" = "--nvme" ]' in code
    assert '-e ".[report]"' in code and "[test" not in code  # pytest, ruff and co. come with make test
    for package in ("slurm-wlm", "munge", "openssh-server", "pdsh", "openmpi-bin"):
        assert package not in code and package in (REPO / "scripts" / "setup_test_env.sh").read_text()
