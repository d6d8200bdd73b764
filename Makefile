# The README's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv and install everything (Horovod included) the first time.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test test-all test-heavy lint format test-jax mutation bench clean

setup:
	@scripts/bootstrap.sh

demo: setup
	$(VENV)/bin/cvbench demo --output-dir demo_out

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test-jax: setup
	KERAS_BACKEND=jax $(PY) -m pytest -m "backend_agnostic and not heavy" $(PYTEST_ARGS)

# The README's test command and CI's: everything but the heaviest tests (tests/heavy_tests.txt),
# under TensorFlow; the backend-agnostic ones again under JAX. About 45 minutes on 2 cores.
# scripts/run_tests.py runs pytest once per folder of tests/ (one process grew to 24 GiB).
RUN_TESTS := $(PY) scripts/run_tests.py
test: lint
	KERAS_BACKEND=tensorflow $(RUN_TESTS) -m "not heavy" $(PYTEST_ARGS)
	KERAS_BACKEND=jax $(RUN_TESTS) -m "backend_agnostic and not heavy" $(PYTEST_ARGS)

# Everything, the heavy tests included (about 2 hours on 2 cores): before an issue is resolved.
test-all: lint
	KERAS_BACKEND=tensorflow $(RUN_TESTS) $(PYTEST_ARGS)
	KERAS_BACKEND=jax $(RUN_TESTS) -m backend_agnostic $(PYTEST_ARGS)

# Only the heavy tests.
test-heavy: setup
	KERAS_BACKEND=tensorflow $(RUN_TESTS) -m heavy $(PYTEST_ARGS)
	KERAS_BACKEND=jax $(RUN_TESTS) -m "backend_agnostic and heavy" $(PYTEST_ARGS)

# The CPU regression check (benchmarks/cpu_check.py): cvbench's ResNet-50 against
# keras.applications in alternating windows, the median ratio held against this CPU kind's
# floors (benchmarks/cpu_floors.json); exit 1 under a floor. A few minutes on 2 cores; run it
# on a quiet machine. BENCH_ARGS: its options, e.g. BENCH_ARGS="--slowdown 0.3" (must fail).
BENCH_ARGS ?=
bench: setup
	$(PY) benchmarks/cpu_check.py $(BENCH_ARGS)

# Mutation testing of the core units (not part of `make test`: about half an hour on 2 cores).
# MUTATION_ARGS: modules and options of scripts/mutation.py, e.g. MUTATION_ARGS="detection --jobs 4".
MUTATION_ARGS ?=
mutation: setup
	$(PY) scripts/mutation.py $(MUTATION_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache demo_out
