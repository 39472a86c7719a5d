# make run   — set up .venv if needed (no system packages), then train the tiny model on 2 CPU ranks with real
#              DeepSpeed ZeRO-2
# make nvme  — also install libaio-dev (as root), which offload=nvme needs
# make test  — set up .venv and the test-only system packages (scripts/setup_test_env.sh: SLURM, sshd, pdsh, Open MPI,
#              libaio), lint, build DeepSpeed's JIT ops once (cached), then run the whole test suite (CI):
#              unit + config tests on both cores with the light integration tests beside them, then the other
#              integration tests one at a time (scripts/run_tests.sh)
# make test-fast — lint, then tests/unit and tests/configs only (not tests/integration), less the modules marked slow
#              (whole products: every option, every documented sample, every imported file; make test runs them)
# make lint  — ruff (rules and line length in pyproject.toml); installs the test tools like make test
PY := .venv/bin/python

.PHONY: setup setup-test nvme run test test-fast lint dry-run clean
setup:
	@bash scripts/setup_env.sh

setup-test:
	@bash scripts/setup_test_env.sh

nvme:
	@bash scripts/setup_env.sh --nvme

run: setup
	$(PY) -m trl_ds

lint: setup-test
	$(PY) -m ruff check .

test: lint
	$(PY) -m trl_ds.cli build-ops
	bash scripts/run_tests.sh

test-fast: lint
	$(PY) -m pytest -q -ra -n 2 -m "not slow" tests/unit tests/configs

dry-run: setup
	$(PY) -m trl_ds cluster=2x8 zero=stage3 model=llama3-8b dry_run=true

clean:
	rm -rf outputs multirun .pytest_cache
