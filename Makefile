# Two commands get a new user going: `make demo` and `make test`. Both create .venv themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint typecheck unit crd clean tools image

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

# The unit and component tiers on WORKERS processes (a module stays on one: one Spark session per
# module), then the e2e tier on its one local cluster, its pods containers of the built image
# (E2E_RUNTIME=process runs them as sandboxed processes: quicker, no container engine).
WORKERS ?= 2
E2E_RUNTIME ?= container
unit: $(STAMP) tools
	$(BIN)/pytest tests testcluster -n $(WORKERS) --dist loadfile
	E2E_RUNTIME=$(E2E_RUNTIME) $(BIN)/pytest e2e

# What the tests run for real besides Python: the pinned kubectl and helm (checksums checked) in
# .venv/bin, and Debian's prometheus, promtool and shellcheck (installed when missing).
tools: $(BIN)/kubectl $(BIN)/helm
	sh e2e/tools/install-system-tools.sh

$(BIN)/kubectl $(BIN)/helm: e2e/tools/install-cluster-tool.sh | $(STAMP)
	sh e2e/tools/install-cluster-tool.sh $(notdir $@) $@

# The project's image, built and tried (docker, or ENGINE=podman; BASE=local builds its base here).
image:
	sh docker/build-image.sh

crd: $(STAMP)
	$(BIN)/finishable crd > crds/finishablesparkjobs.finishable.dev.yaml
	$(BIN)/finishable crd --snapshot > crds/finishablesparksnapshots.finishable.dev.yaml
	cp crds/finishablesparkjobs.finishable.dev.yaml crds/finishablesparksnapshots.finishable.dev.yaml \
		charts/finishable-spark-operator/crds/

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
