# Two commands do all the set-up on a fresh machine:
#   make demo   - the main job on the embedded default (for now: validate and render the quickstart)
#   make test   - lint, type checks and the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-client

.PHONY: venv demo test lint bench clean

# torch first and pinned: this version has a CPU wheel on the machines we build on; an
# unpinned torch (asked for by lightning) would download a multi-GB CUDA build.
TORCH ?= torch==2.13.0

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check '$(TORCH)'
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,runtime]'
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/kctl-train validate examples/quickstart.yaml
	$(BIN)/kctl-train render examples/quickstart.yaml --output-dir out/quickstart
	@echo "The PyTorchJob a cluster would get: out/quickstart/quickstart.yaml"

lint: $(STAMP)
	$(BIN)/ruff check operator_client tests bench
	$(BIN)/ruff format --check operator_client tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/first_step.py
	$(BIN)/python bench/checkpoint_upload.py
	$(BIN)/python bench/aggregate.py
	$(BIN)/python bench/collect_transfer.py

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache .hypothesis
