# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= out/demo

.PHONY: demo test install clean

install: $(STAMP)

# nuscenes-devkit pins numpy<2: its real needs come from the [nuscenes] extra, the devkit itself
# is installed without dependencies (used by tests and cross-checks only).
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,nuscenes]'
	$(PY) -m pip install -q --no-deps 'nuscenes-devkit>=1.1'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/hydranet demo --out $(DEMO_OUT)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -n 2 -q

clean:
	rm -rf $(VENV) out
