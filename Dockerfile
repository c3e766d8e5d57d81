# One image for the operator, the drivers, Spark's executors and the shuffle pods.
#
#   make image          (docker/build-image.sh: builds it as finishable-spark-operator:0.1.0,
#                        tries it and prints its size; the base can be built locally)
#   docker build -t finishable-spark-operator:0.1.0 .       (the same, by hand)
#
# Python 3.11 with Java 17 (PySpark needs a JVM). PySpark comes from pip, and a pip-installed
# pyspark is a complete Spark distribution (jars, bin/, sbin/), so SPARK_HOME points into the
# virtual environment's site-packages. Which process a container runs is chosen by its command:
#   operator      finishable operator ...          (the chart's Deployment)
#   driver        finishable driver                (the driver pods the operator creates)
#   shuffle pods  finishable shuffle-server ...    (the shuffle StatefulSet)
#   executors     no command: Spark's Kubernetes backend starts executor pods with the args
#                 "executor" and the SPARK_* environment (SPARK_DRIVER_URL, SPARK_EXECUTOR_ID,
#                 ...), which docker/entrypoint.sh turns into Spark's executor JVM, as the
#                 entrypoint of Spark's own images does.
#
# BASE: any Debian bookworm with Python 3.11 and its venv module. The default is the public
# python image; where it cannot be pulled, docker/build-image.sh makes one from a Debian minbase
# root file system (mmdebstrap). Works with the classic builder (DOCKER_BUILDKIT=0) and podman.
ARG BASE=python:3.11-slim-bookworm

# -- build: the virtual environment, made where pip may need the build machine's CA ----------------
FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# docker/build-local/ holds what docker/build-image.sh hands the build (never committed; empty
# when built by hand): the build machine's CA bundle, for networks that re-sign TLS, trusted by pip
# in this stage only, constraints.txt, the versions the tests ran with, so that the image runs
# what was tested, and jars/, Spark's S3 connector (docker/spark-jars.sh).
COPY docker/build-local/ /tmp/build-local/
# Two layers, so that a change of the code (or of the README) rebuilds in seconds: the
# dependencies, from pyproject.toml alone (a placeholder package stands in for operator/, built
# apart so that nothing of it is left for the second build), then the package itself without them.
COPY pyproject.toml /tmp/dependencies/
RUN if [ -s /tmp/build-local/ca-certificates.crt ]; then \
        export PIP_CERT=/tmp/build-local/ca-certificates.crt; fi \
    && if [ -s /tmp/build-local/constraints.txt ]; then \
        export PIP_CONSTRAINT=/tmp/build-local/constraints.txt; fi \
    && cd /tmp/dependencies && mkdir -p operator/finishable && touch README.md \
    && echo '__version__ = "0"' > operator/finishable/__init__.py \
    && python3 -m venv /opt/finishable/venv \
    && /opt/finishable/venv/bin/pip install --upgrade pip \
    && /opt/finishable/venv/bin/pip install '.[iceberg,kafka]' \
    && /opt/finishable/venv/bin/pip uninstall --yes finishable-spark-operator \
    && cd / && rm -rf /tmp/dependencies
# Spark's S3 connector (s3a://, docker/spark-jars.txt) and the project's data source (jvm/), put
# on Spark's classpath.
RUN if [ -d /tmp/build-local/jars ]; then \
        cp /tmp/build-local/jars/*.jar /opt/finishable/venv/lib/python3.11/site-packages/pyspark/jars/; fi
COPY pyproject.toml README.md /src/
COPY operator /src/operator
RUN if [ -s /tmp/build-local/ca-certificates.crt ]; then \
        export PIP_CERT=/tmp/build-local/ca-certificates.crt; fi \
    && /opt/finishable/venv/bin/pip install --no-deps '/src[iceberg,kafka]' \
    && find /opt/finishable/venv -name __pycache__ -prune -exec rm -rf {} +

# -- the image ----------------------------------------------------------------------------------
FROM ${BASE}
ARG UID=1000
ENV PATH=/opt/finishable/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk \
    SPARK_HOME=/opt/finishable/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/finishable/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/finishable/venv/bin/python \
    HOME=/home/finishable

# Java 17 for Spark, tini to reap the JVM's children and forward signals, procps for Spark's
# scripts.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" "$JAVA_HOME" \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*

COPY --from=build /opt/finishable/venv /opt/finishable/venv
RUN python -c "import os, pyspark; assert os.path.dirname(pyspark.__file__) == os.environ['SPARK_HOME']"

# The example manifests run local:///opt/finishable/examples/... programs.
COPY examples /opt/finishable/examples
COPY docker/entrypoint.sh /opt/finishable/entrypoint.sh

RUN useradd --uid "$UID" --user-group --create-home --home-dir /home/finishable finishable \
    && mkdir -p /tmp/finishable && chown "$UID:$UID" /tmp/finishable \
    && chmod 0755 /opt/finishable/entrypoint.sh

# Numeric, so that runAsNonRoot can verify it; the same uid as ARG UID.
USER ${UID}:${UID}
WORKDIR /home/finishable
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/finishable/entrypoint.sh"]
CMD ["finishable", "--help"]
