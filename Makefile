# The two commands: `make demo` and `make test`. Each sets up .venv on first
# use (idempotently), builds the C++ core incrementally, then runs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed

.PHONY: demo test build clean

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $(STAMP)

build: $(STAMP)
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .

demo: build
	$(PY) examples/demo.py

test: build
	$(PY) -m pytest -q tests

clean:
	rm -rf build torch_tpu/*.so *.egg-info
