# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.installed-demo-stamp
DEMO_OUT ?= out/demo

.PHONY: demo test test-integration labelstudio install clean

install: $(STAMP)

# `pip install .` alone is the car side (no torch: README "Installing"). The demo needs [all] (train, sim,
# engine); the tests add [dev] (pytest, ruff, ray) and [nuscenes] on top (`make test` after `make demo` installs
# only those). nuscenes-devkit pins numpy<2: its real needs come from the [nuscenes] extra, the devkit itself
# is installed without dependencies (used by tests and cross-checks only), as is TrackEval (pyproject.toml).
# --no-compile: Python compiles each module on its first import (and caches it) instead of pip compiling every
# file of every package up front (measured here: install 136 -> 84 s, the first import of the stack 6.5 -> 14.6 s;
# [all] alone 70 s)
$(DEMO_STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[all]'
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(PY) -m pip install -q --no-compile -e '.[all,dev,nuscenes]'
	$(PY) -m pip install -q --no-compile --no-deps 'nuscenes-devkit>=1.1' 'trackeval>=1.3'
	touch $(STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/hydranet demo --out $(DEMO_OUT)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -n 2 -q

# Label Studio pins packages the project does not: it lives in its own virtual environment, never in
# .venv. tests/test_engine_labeling_ls.py starts it on 127.0.0.1 with a fresh data folder (docs/labeling.md);
# `make test` runs that test too once this venv exists (or $$HYDRANET_LABEL_STUDIO_URL/TOKEN name a server).
LS_VENV := .venv-labelstudio
LS_STAMP := $(LS_VENV)/.installed-stamp

LS_DATA ?= out/labelstudio
LS_PORT ?= 8089

# about 6 minutes on a 2-core machine: pip's own lines (one per package) are the progress
$(LS_STAMP):
	@echo "installing Label Studio 1.23 into $(LS_VENV), its own environment (about 6 minutes here)"
	test -x $(LS_VENV)/bin/python || $(PYTHON) -m venv $(LS_VENV)
	$(LS_VENV)/bin/pip install --progress-bar off 'label-studio~=1.23.0'
	touch $(LS_STAMP)
	@echo "Label Studio installed in $(LS_VENV)"

# A local server for labelling: 127.0.0.1:$(LS_PORT), a fresh data folder $(LS_DATA) (refused if it holds
# anything), progress while it starts (about 3.5 minutes the first time), then its URL, login and API token
# (docs/labeling.md, "A local server"). Ctrl-C stops it.
labelstudio: $(STAMP) $(LS_STAMP)
	$(VENV)/bin/hydranet engine label-studio --data $(LS_DATA) --port $(LS_PORT) --ls-bin $(LS_VENV)/bin/label-studio

test-integration: $(STAMP) $(LS_STAMP)
	$(VENV)/bin/pytest -q -ra tests/test_engine_labeling_ls.py

clean:
	rm -rf $(VENV) out
