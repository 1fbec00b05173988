#!/usr/bin/env bash
# Make the two base images docker/Dockerfile starts FROM, without a registry, into the stack's own container
# storage (the caller sets CONTAINERS_CONF, CONTAINERS_STORAGE_CONF, CONTAINERS_REGISTRIES_CONF):
#   PYTHON_IMAGE  a Debian SUITE rootfs (mmdebstrap minbase + python3, ca-certificates, passwd) with the CA
#                 certificates this machine trusts, so TLS to the package index works inside builds
#   UV_IMAGE      FROM scratch with /uv and /uvx from the static (musl) uv wheel of UV_VERSION on PyPI
# Env: SUITE, PYTHON_IMAGE, PYTHON_MINOR (e.g. 3.11: the suite's python3 must be it), UV_IMAGE, UV_VERSION,
# WORK (scratch directory, removed at the end). The caller holds the images lock.
set -euo pipefail
: "${SUITE:?}" "${PYTHON_IMAGE:?}" "${PYTHON_MINOR:?}" "${UV_IMAGE:?}" "${UV_VERSION:?}" "${WORK:?}"
rm -rf "$WORK"; mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

if ! podman image exists "$PYTHON_IMAGE"; then
  echo "$PYTHON_IMAGE: mmdebstrap $SUITE (about a minute)"
  # as in Debian's slim images: no manuals, docs or translations. The hooks add the local CAs this machine
  # trusts (what update-ca-certificates added to its bundle: a proxy's, a company's).
  mmdebstrap --variant=minbase --include=python3,ca-certificates,passwd \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='if [ -d /usr/local/share/ca-certificates ]; then
cp -R /usr/local/share/ca-certificates/. "$1/usr/local/share/ca-certificates/"; fi' \
    --customize-hook='chroot "$1" update-ca-certificates' \
    --customize-hook="test -x \"\$1/usr/bin/python$PYTHON_MINOR\" \
|| { echo '$SUITE has no python$PYTHON_MINOR, which docker/Dockerfile expects' >&2; exit 1; }" \
    "$SUITE" "$WORK/rootfs.tar"
  podman import -q \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$WORK/rootfs.tar" "$PYTHON_IMAGE"
  echo "$PYTHON_IMAGE: imported"
fi

if ! podman image exists "$UV_IMAGE"; then
  echo "$UV_IMAGE: uv $UV_VERSION from PyPI"
  uv pip install -q --no-deps --only-binary :all: --target "$WORK/uv" \
    --python-platform "$(uname -m)-unknown-linux-musl" "uv==$UV_VERSION"
  mkdir -p "$WORK/uvroot"
  install -m 0755 "$WORK/uv/bin/uv" "$WORK/uv/bin/uvx" "$WORK/uvroot/"
  tar -C "$WORK/uvroot" --owner=0 --group=0 -cf "$WORK/uv.tar" uv uvx
  podman import -q --change 'ENTRYPOINT ["/uv"]' "$WORK/uv.tar" "$UV_IMAGE"
  echo "$UV_IMAGE: imported"
fi
