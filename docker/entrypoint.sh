#!/bin/bash
# Entrypoint of the finishable image (see the Dockerfile).
#
# Spark's Kubernetes backend starts an executor pod with the single argument "executor" and
# describes it in the environment; this builds the executor's JVM command from it, as the
# entrypoint of Spark's own images does (resource-managers/kubernetes/docker/.../entrypoint.sh).
# Every other command (finishable operator, finishable driver, finishable shuffle-server, ...)
# runs as given.
set -euo pipefail

if [[ "${1:-}" != "executor" ]]; then
    exec "$@"
fi
shift

# Spark passes the executor's Java options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
java_opts=()
while IFS='=' read -r name _; do
    java_opts+=("${!name}")
done < <(env | grep -E '^SPARK_JAVA_OPT_[0-9]+=' | sort -t_ -k4 -n)

# Spark's conf directory first (the log4j2 settings Spark copied from the driver live there).
classpath="${SPARK_HOME}/jars/*"
if [[ -n "${SPARK_CONF_DIR:-}" ]]; then
    classpath="${SPARK_CONF_DIR}:${classpath}"
fi
if [[ -n "${SPARK_CLASSPATH:-}" ]]; then
    classpath="${SPARK_CLASSPATH}:${classpath}"
fi
if [[ -n "${SPARK_EXTRA_CLASSPATH:-}" ]]; then
    classpath="${classpath}:${SPARK_EXTRA_CLASSPATH}"
fi

exec "${JAVA_HOME}/bin/java" \
    "${java_opts[@]}" \
    -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "${classpath}" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL}" \
    --executor-id "${SPARK_EXECUTOR_ID}" \
    --cores "${SPARK_EXECUTOR_CORES}" \
    --app-id "${SPARK_APPLICATION_ID}" \
    --hostname "${SPARK_EXECUTOR_POD_IP}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
    --podName "${SPARK_EXECUTOR_POD_NAME}" \
    "$@"
