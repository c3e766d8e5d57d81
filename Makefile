# Two commands get a new user going: `make demo` and `make test`. Both create .venv themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint typecheck unit crd clean kubectl

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/finishable run examples/streaming/bounded.yaml --fresh
	$(BIN)/python examples/streaming/show.py .finishable/clickstream-bounded/output

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) $(BIN)/kubectl
	$(BIN)/pytest

# The pinned kubectl (v1.33.9, checksums checked) that e2e/test_kubectl.py drives.
kubectl: $(BIN)/kubectl

$(BIN)/kubectl: e2e/tools/install-kubectl.sh | $(STAMP)
	sh e2e/tools/install-kubectl.sh $@

crd: $(STAMP)
	$(BIN)/finishable crd > crds/finishablesparkjobs.finishable.dev.yaml

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
