#!/usr/bin/env bash
# Build etcd from the Go module proxy through a wrapper module (its go.mod has replace lines).
set -euo pipefail
CACHE=${SHOAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal}
mkdir -p "$CACHE"
# One builder at a time per part: a second run waits for the first, then finds the cache warm.
exec 9>"$CACHE/.etcd.lock"
flock -n 9 || { echo "etcd: another build is running; waiting for it"; flock 9; }
V=${SHOAL_ETCD_VERSION:-v3.6.16}
OUT=$CACHE/bin/etcd-$V
WRAP=$CACHE/src/etcd-$V
export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOFLAGS=-buildvcs=false CGO_ENABLED=0
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
