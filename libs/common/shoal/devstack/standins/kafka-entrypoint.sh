#!/bin/sh
# The stand-in for apache/kafka in local clusters that cannot pull it: the same environment conventions for
# what deploy/k8s/overlays/dev sets. Every KAFKA_<NAME> variable (but the JVM ones) becomes a broker property:
# NAME lower-cased, "_" -> ".", "__" -> "_", "___" -> "-"; CLUSTER_ID formats the log dirs once (KRaft).
set -eu
conf=/tmp/kafka
mkdir -p "$conf"
props="$conf/server.properties"
: > "$props"
env | sort | while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_HEAP_OPTS|KAFKA_OPTS|KAFKA_JVM_PERFORMANCE_OPTS|KAFKA_LOG4J_OPTS|KAFKA_GC_LOG_OPTS|KAFKA_JMX_OPTS) ;;
    KAFKA_*)
      key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/\x01/g' -e 's/_/./g' -e 's/\x01/_/g')
      printf '%s=%s\n' "$key" "$value" >> "$props" ;;
  esac
done
: "${CLUSTER_ID:?set CLUSTER_ID (a Kafka cluster id) as for apache/kafka}"
# shellcheck disable=SC2086  # the *_OPTS variables are word lists
set -- java ${KAFKA_HEAP_OPTS:--Xmx512m} -XX:+UseSerialGC ${KAFKA_OPTS:-} \
  -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties -cp '/opt/kafka/libs/*'
"$@" kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$props" --ignore-formatted
exec "$@" kafka.Kafka "$props"
