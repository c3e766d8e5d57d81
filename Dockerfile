# One image for the operator, the drivers, Spark's executors and the shuffle pods.
#
#   docker build -t finishable-spark-operator:0.1.0 .
#
# Python 3.11 with Java 17 (PySpark needs a JVM). PySpark comes from pip, and a pip-installed
# pyspark is a complete Spark distribution (jars, bin/, sbin/), so SPARK_HOME points into
# site-packages. Which process a container runs is chosen by its command:
#   operator      finishable operator ...          (the chart's Deployment)
#   driver        finishable driver                (the driver pods the operator creates)
#   shuffle pods  finishable shuffle-server ...    (the shuffle StatefulSet)
#   executors     no command: Spark's Kubernetes backend starts executor pods with the args
#                 "executor" and the SPARK_* environment (SPARK_DRIVER_URL, SPARK_EXECUTOR_ID,
#                 ...), which docker/entrypoint.sh turns into Spark's executor JVM, as the
#                 entrypoint of Spark's own images does.
FROM python:3.11-slim-bookworm

ARG UID=1000
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python3 \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python3 \
    HOME=/home/finishable

# Java 17 for Spark, tini to reap the JVM's children and forward signals.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" "$JAVA_HOME" \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install . \
    && python -c "import os, pyspark; assert os.path.dirname(pyspark.__file__) == os.environ['SPARK_HOME']" \
    && rm -rf /src

# The example manifests run local:///opt/finishable/examples/... programs.
COPY examples /opt/finishable/examples
COPY docker/entrypoint.sh /opt/finishable/entrypoint.sh

RUN useradd --uid "$UID" --user-group --create-home --home-dir /home/finishable finishable \
    && mkdir -p /tmp/finishable && chown "$UID:$UID" /tmp/finishable \
    && chmod 0755 /opt/finishable/entrypoint.sh

USER 1000:1000
WORKDIR /home/finishable
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/finishable/entrypoint.sh"]
CMD ["finishable", "--help"]
