# make check  - build .venv with the reader's requirements (requirements.txt: torch, triton,
#               numpy) if needed, then verify the scripts' output (./check_outputs.sh)
# make test   - add the contributors' requirements (requirements-dev.txt: pytest, pytest-xdist,
#               notebook tools, shellcheck, uv, matplotlib) to .venv if needed, then run the test
#               suite over every core (-n auto)
# make bench  - GELU bandwidth benchmark (needs a CUDA GPU; plots with matplotlib, as make test)
# make matrix - a venv per PyTorch release: checker and tests in each (slow, downloads GBs; never in CI)
# make notebook - regenerate notebooks/chapter17.ipynb from the scripts (then run it on a GPU)
# make container, make container-arm64 - build the image and run the checker in it, with
#               docker (or podman); the arm64 one as an Apple Silicon Mac runs it
# make clean  - remove .venv
#
# PY=/path/to/python uses an interpreter that already has torch and triton
# instead of .venv, e.g. `make check PY=python3` on a machine with CUDA PyTorch.

VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
PY ?= $(VENV_PYTHON)
# .venv is built only when it is the interpreter in use.
ENV_DEPENDENCY := $(if $(filter $(VENV_PYTHON),$(PY)),$(VENV_STAMP))
DEV_DEPENDENCY := $(if $(filter $(VENV_PYTHON),$(PY)),$(DEV_STAMP))

.PHONY: check test bench matrix notebook container container-arm64 clean

check: $(ENV_DEPENDENCY)
	PYTHON=$(PY) ./check_outputs.sh

# -n auto: pytest-xdist (requirements-dev.txt) spreads the tests over the machine's cores.
test: $(DEV_DEPENDENCY)
	$(PY) -m pytest -n auto

bench: $(DEV_DEPENDENCY)
	$(PY) benchmarks/gelu_bandwidth.py

# Pythons for the pinned pair besides the one running the tool (pyenv's, where present).
MATRIX_PYTHONS ?= $(wildcard $(HOME)/.pyenv/versions/3.10.*/bin/python $(HOME)/.pyenv/versions/3.12.*/bin/python $(HOME)/.pyenv/versions/3.13.*/bin/python)

matrix:
	python3 tools/version_matrix.py --pinned-pythons $(MATRIX_PYTHONS)

notebook: $(ENV_DEPENDENCY)
	$(PY) tools/build_notebook.py

# CONTAINER: docker, or podman where docker is absent (or any command with their verbs).
CONTAINER ?= $(shell command -v docker || command -v podman)

container:
	CONTAINER=$(CONTAINER) tools/container_check.sh

container-arm64:
	CONTAINER=$(CONTAINER) tools/container_check.sh --platform linux/arm64

$(VENV_STAMP): requirements.txt
	python3 -m venv $(VENV)
	$(VENV_PYTHON) -m pip install -r requirements.txt
	touch $@

$(DEV_STAMP): $(VENV_STAMP) requirements-dev.txt
	$(VENV_PYTHON) -m pip install -r requirements-dev.txt
	touch $@

clean:
	rm -rf $(VENV)
