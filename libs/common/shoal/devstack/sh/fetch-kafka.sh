#!/usr/bin/env bash
# Fetch Apache Kafka (KRaft) jars from Maven Central into the cache: libs/ for `java -cp 'libs/*'`.
set -euo pipefail
. "$(dirname "$0")/common.sh"
one_builder kafka
V=${SHOAL_KAFKA_VERSION:-4.1.1}
LOG4J=${SHOAL_LOG4J_VERSION:-2.25.3}
SLF4J=${SHOAL_SLF4J_VERSION:-2.0.17}
DIR=$CACHE/kafka-$V
# The stamp names the recipe: changing a version below re-fetches into the same directory.
STAMP="kafka=$V log4j=$LOG4J slf4j=$SLF4J"
if [ -f "$DIR/.done" ] && [ "$(cat "$DIR/.done")" = "$STAMP" ]; then echo "kafka $V: cached"; exit 0; fi
command -v mvn >/dev/null || { echo "fetch-kafka: mvn not found (apt-get install -y maven)" >&2; exit 1; }
command -v java >/dev/null || { echo "fetch-kafka: java not found (apt-get install -y default-jre-headless)" >&2; exit 1; }
mkdir -p "$DIR"
cat > "$DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>shoal.local</groupId><artifactId>kafka-fetch</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$V</version></dependency>
    <!-- Kafka's POM pins slf4j-api 1.7, which cannot see the log4j2 slf4j2 provider: pin the 2.x API. -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$LOG4J</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J</version></dependency>
  </dependencies>
</project>
POM
echo "kafka $V: fetching jars from Maven Central"
mvn -q -B -Dstyle.color=never -f "$DIR/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
  org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$DIR/libs.tmp"
rm -rf "$DIR/libs"; mv "$DIR/libs.tmp" "$DIR/libs"
echo "$STAMP" > "$DIR/.done"
echo "kafka $V: ready in $DIR/libs"
