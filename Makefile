# make run   — set up .venv if needed, then train the tiny model on 2 CPU ranks with real DeepSpeed ZeRO-2
# make test  — set up .venv if needed, build DeepSpeed's JIT ops once (cached), then run the whole test suite (CI)
# make test-fast — the tests that spawn no ranks (no DeepSpeed engine, no torchrun)
PY := .venv/bin/python

.PHONY: setup run test test-fast dry-run clean
setup:
	@bash scripts/setup_env.sh

run: setup
	$(PY) -m trl_ds

test: setup
	$(PY) -m trl_ds.build_ops
	$(PY) -m pytest -q -ra tests

test-fast: setup
	$(PY) -m pytest -q -ra -m "not integration" tests

dry-run: setup
	$(PY) -m trl_ds cluster=2x8 zero=stage3 model=llama3-8b dry_run=true

clean:
	rm -rf outputs multirun .pytest_cache
