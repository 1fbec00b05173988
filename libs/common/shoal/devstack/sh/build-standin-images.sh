#!/usr/bin/env bash
# Stand-ins for the third-party images deploy/k8s/overlays/dev uses (redis, apache/kafka, kube-webhook-certgen),
# for local clusters that reach no image registry: Debian SUITE rootfs made with mmdebstrap, our own entrypoints
# (shoal/devstack/standins/), imported into the stack's container storage (the caller sets CONTAINERS_*).
# Env: SUITE, WORK (scratch, removed at the end), STANDINS (that directory), KAFKA_LIBS (the cached Kafka jars),
# REDIS_IMAGE, KAFKA_IMAGE, CERTGEN_IMAGE (names with a tag that changes with their inputs). An image already
# in storage is kept. The caller holds the images lock.
set -euo pipefail
: "${SUITE:?}" "${WORK:?}" "${STANDINS:?}" "${KAFKA_LIBS:?}" "${REDIS_IMAGE:?}" "${KAFKA_IMAGE:?}" "${CERTGEN_IMAGE:?}"
rm -rf "$WORK"; mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
slim=(--variant=minbase --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
      --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*'
      --dpkgopt='path-exclude=/usr/share/info/*')

standin() {  # name image packages entrypoint-json [mmdebstrap hooks...]
  local name=$1 image=$2 packages=$3 entrypoint=$4; shift 4
  if podman image exists "$image"; then return; fi
  echo "$image: mmdebstrap $SUITE + $packages"
  mmdebstrap "${slim[@]}" --include="$packages" "$@" "$SUITE" "$WORK/$name.tar"
  podman import -q --change "ENTRYPOINT $entrypoint" --change 'ENV LANG=C.UTF-8' "$WORK/$name.tar" "$image"
  rm -f "$WORK/$name.tar"
  echo "$image: imported"
}

standin redis "$REDIS_IMAGE" redis-server '["redis-server"]' \
  --customize-hook='mkdir -p "$1/data" && chmod 0777 "$1/data"'
# the JRE's postinst links its manual page: the directory must exist although manuals are left out
standin kafka "$KAFKA_IMAGE" default-jre-headless '["/usr/local/bin/kafka-entrypoint.sh"]' \
  --essential-hook='mkdir -p "$1/usr/share/man/man1"' \
  --customize-hook='mkdir -p "$1/opt/kafka/libs" "$1/var/lib/kafka/data" && chmod 0777 "$1/var/lib/kafka/data"' \
  --customize-hook="copy-in $KAFKA_LIBS/. /opt/kafka/libs" \
  --customize-hook="copy-in $STANDINS/log4j2.properties /opt/kafka" \
  --customize-hook="copy-in $STANDINS/kafka-entrypoint.sh /usr/local/bin" \
  --customize-hook='chmod 0755 "$1/usr/local/bin/kafka-entrypoint.sh"'
standin certgen "$CERTGEN_IMAGE" python3,openssl '["python3", "/usr/local/bin/certgen.py"]' \
  --customize-hook="copy-in $STANDINS/certgen.py /usr/local/bin"
