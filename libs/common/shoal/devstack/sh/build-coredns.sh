#!/usr/bin/env bash
# Build CoreDNS (the real node's cluster DNS) from the Go module proxy. Its go.mod has no replace lines and its
# plugin list (core/plugin/zplugin.go) is committed, so `go install module@version` builds the stock binary.
set -euo pipefail
. "$(dirname "$0")/common.sh"
one_builder coredns
V=${SHOAL_COREDNS_VERSION:-v1.14.7}
OUT=$CACHE/bin/coredns-$V
if [ -x "$OUT/coredns" ]; then echo "coredns $V: cached"; exit 0; fi
mkdir -p "$OUT"
echo "coredns $V: building (first build takes minutes)"
GOBIN=$OUT.tmp go install -p 2 -ldflags "-s -w" "github.com/coredns/coredns@$V"
mv "$OUT.tmp/coredns" "$OUT/coredns"
rmdir "$OUT.tmp"
echo "coredns $V: built"
