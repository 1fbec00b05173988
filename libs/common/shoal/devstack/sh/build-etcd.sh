#!/usr/bin/env bash
# Build etcd from the Go module proxy through a wrapper module (its go.mod has replace lines).
set -euo pipefail
. "$(dirname "$0")/common.sh"
one_builder etcd
V=${SHOAL_ETCD_VERSION:-v3.6.16}
OUT=$CACHE/bin/etcd-$V
WRAP=$CACHE/src/etcd-$V
if [ -x "$OUT/etcd" ]; then echo "etcd $V: cached"; exit 0; fi
mkdir -p "$OUT" "$WRAP"; cd "$WRAP"
if [ ! -f .tidy-done ]; then
  printf 'module shoal.local/etcdbuild\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$V" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
  go mod tidy
  touch .tidy-done
fi
echo "etcd $V: building"
go build -tags tools -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$OUT/etcd.tmp" "$OUT/etcd"
echo "etcd $V: built"
