# Two commands get a new user going: `make demo` and `make test`. Both create .venv themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test test-all venv lint typecheck crd clean tools jars image control-plane real-node

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/finishable run examples/streaming/bounded.yaml --fresh
	$(BIN)/python examples/streaming/show.py .finishable/clickstream-bounded/output

# Two tiers (testcluster/tiers.py: every test is marked quick or full). `make test` is what CI and
# every change run: ruff, mypy and the quick tier (the unit and component tests on WORKERS
# processes, a module on one, then an e2e smoke on the local cluster). `make test-all` runs both
# tiers: every e2e flow, the kill sweeps, the long streaming tests; run it before resolving an
# issue that touches the runtime. Both print where their minutes went, the one-time setup apart.
# E2E_RUNTIME=process runs the e2e pods as sandboxed processes (no container engine, no image).
WORKERS ?= 2
E2E_RUNTIME ?= container
export WORKERS E2E_RUNTIME

test:
	@sh testcluster/tools/run-tier.sh quick

test-all:
	@sh testcluster/tools/run-tier.sh all

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

# What the tests run for real besides Python: the pinned kubectl and helm (checksums checked) in
# .venv/bin, and Debian's prometheus, promtool, shellcheck and postgresql (installed when missing).
tools: $(BIN)/kubectl $(BIN)/helm
	sh testcluster/tools/install-system-tools.sh

$(BIN)/kubectl $(BIN)/helm: testcluster/tools/install-cluster-tool.sh | $(STAMP)
	sh testcluster/tools/install-cluster-tool.sh $(notdir $@) $@

# The jars .venv's pyspark loads besides its own: Spark's S3 connector (s3a://: hadoop-aws and the
# AWS SDK modules it needs, pinned with their sha256 in docker/spark-jars.txt, fetched once into
# ~/.cache/finishable) and the project's data source (jvm/, compiled once per change of it); and
# the jars of the Kafka broker the tests start (testcluster/kafka-jars.txt, pinned the same way).
SPARK_JARS_DIR = $$($(BIN)/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
jars: $(STAMP)
	sh docker/spark-jars.sh "$(SPARK_JARS_DIR)"
	sh jvm/build.sh "$(SPARK_JARS_DIR)"
	$(BIN)/python -m testcluster.kafka fetch

# The project's image, built and tried (docker, or ENGINE=podman; BASE=local builds its base here).
image:
	sh docker/build-image.sh

# The real Kubernetes control plane of the full tier (testcluster/controlplane): kube-apiserver,
# kube-controller-manager, kube-scheduler and etcd of the releases the Go modules pin, built once
# into ~/.cache/finishable (minutes; then nothing to do).
control-plane:
	sh testcluster/tools/build-control-plane.sh >/dev/null

# The full tier's real node besides (testcluster/controlplane/realnode.py): the kubelet and
# kube-proxy of that release, CoreDNS, and the pods' sandbox (pause.c, compiled here).
real-node:
	sh testcluster/tools/build-control-plane.sh kubelet kube-proxy coredns pause >/dev/null

crd: $(STAMP)
	$(BIN)/finishable crd > crds/finishablesparkjobs.finishable.dev.yaml
	$(BIN)/finishable crd --snapshot > crds/finishablesparksnapshots.finishable.dev.yaml
	cp crds/finishablesparkjobs.finishable.dev.yaml crds/finishablesparksnapshots.finishable.dev.yaml \
		charts/finishable-spark-operator/crds/

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
