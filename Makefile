# The two commands: `make demo` and `make test`; `make bench` runs the
# benchmarks. Each sets up .venv on first use (idempotently), builds the C++
# core incrementally (objects kept in build/temp: an unchanged tree compiles
# nothing), then runs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed
EDITABLE := $(VENV)/.editable-installed
BENCH_STAMP := $(VENV)/.bench-requirements-installed
INTEGRATIONS_STAMP := $(VENV)/.integration-requirements-installed
# e.g. make bench BENCH_ARGS='--workloads mlp gpt-tiny --modes cpu strict --steps 10'
BENCH_ARGS ?=
HOST_BENCH_ARGS ?=
# pytest workers for make test (CI's machine has two cores); 0 runs in this process.
TEST_WORKERS ?= 2

.PHONY: demo test bench build clean

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $(STAMP)

# The editable install (package metadata, entry points) once per change of the
# packaging files; after that only the extension is rebuilt, by ninja.
$(EDITABLE): $(STAMP) setup.py pyproject.toml
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $(EDITABLE)

build: $(EDITABLE)
	$(PY) setup.py -q build_ext --inplace

demo: build
	$(PY) examples/demo.py

# The libraries tests/integrations runs against (their own requirements file).
$(INTEGRATIONS_STAMP): tests/integrations/requirements.txt $(STAMP)
	$(PY) -m pip install -q -r tests/integrations/requirements.txt
	touch $(INTEGRATIONS_STAMP)

test: build $(INTEGRATIONS_STAMP)
	$(PY) tools/check_layers.py
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30 tests

$(BENCH_STAMP): bench/requirements.txt $(STAMP)
	$(PY) -m pip install -q -r bench/requirements.txt
	touch $(BENCH_STAMP)

# Training-step benchmark across modes (bench/results/modes.json, .png), the
# host cost of compute-free steps (bench/results/host_overhead.json, .png) and,
# where valgrind is installed, the same in instructions (host_instructions).
bench: build $(BENCH_STAMP)
	$(PY) bench/modes.py $(BENCH_ARGS)
	$(PY) bench/host_overhead.py $(HOST_BENCH_ARGS)
	if command -v valgrind >/dev/null; then $(PY) bench/host_instructions.py; fi

clean:
	rm -rf build torch_tpu/*.so *.egg-info $(EDITABLE)
