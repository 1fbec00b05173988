#!/usr/bin/env bash
# Build the Tilt CLI from the Go module proxy into Shoal's cache (Tilt is on neither PyPI nor npm).
#
#   bash deploy/tools/build-tilt.sh                  # prints the binary's path on its last line
#   bash deploy/tools/build-tilt.sh --resolve-only   # only download modules (network, little CPU)
#   bash deploy/tools/build-tilt.sh --path           # only print where the binary is (or will be)
#
# Tilt's go.mod has two replace directives, which `go install …@v` refuses, so the build goes through a
# small wrapper module that repeats them. The module zip on the proxy lacks the web UI's compiled assets
# (pkg/assets/build holds only robots.txt), and `tilt up`/`tilt ci` then refuse to start ("running in prod
# mode, but JS/CSS files are not available"): the wrapper replaces tilt with a copy of the module that has a
# one-line placeholder pkg/assets/build/index.html (ours, below), so Tilt runs with a stub web page; the CLI
# (`tilt get`, `tilt logs`, `tilt describe`, `tilt ci`) works as usual. Resumable: the copy, module
# resolution and the build each leave a marker, and the Go module/build caches live in the cache dir. A warm
# cache makes this a no-op.
set -euo pipefail
CACHE=${SHOAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal}
TILT=${SHOAL_TILT_VERSION:-v0.37.1}
# the variant names the patch: a binary without it (an older build of this script) lives elsewhere
VARIANT=webstub1
BIN=$CACHE/bin/tilt-$TILT-$VARIANT
WRAP=$CACHE/src/tilt-$TILT-$VARIANT
# cgo is required: tilt's Tiltfile language server links tree-sitter (C), so a C compiler must be on PATH.
export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOFLAGS=-buildvcs=false CGO_ENABLED=1
if [ "${1:-}" = "--path" ]; then echo "$BIN/tilt"; exit 0; fi
if [ -x "$BIN/tilt" ]; then echo "tilt $TILT: cached"; echo "$BIN/tilt"; exit 0; fi
command -v go >/dev/null || { echo "tilt $TILT: 'go' is not on PATH (install Go >= 1.25)" >&2; exit 1; }
command -v "${CC:-gcc}" >/dev/null || { echo "tilt $TILT: no C compiler (apt-get install -y gcc)" >&2; exit 1; }
mkdir -p "$BIN" "$WRAP"
cd "$WRAP"
if [ ! -f tilt/.patched ]; then
  echo "tilt $TILT: copying the module with a placeholder web page"
  tiltdir=$(go mod download -json github.com/tilt-dev/tilt@"$TILT" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  rm -rf tilt tilt.tmp
  cp -R "$tiltdir" tilt.tmp
  chmod -R u+w tilt.tmp  # the module cache is read-only
  mkdir -p tilt.tmp/pkg/assets/build
  echo '<!doctype html><meta charset="utf-8"><title>Tilt</title><p>This Tilt was built without its web UI (Shoal, deploy/tools/build-tilt.sh): use <code>tilt get uiresources</code>, <code>tilt logs</code>, <code>tilt describe</code>.</p>' \
    > tilt.tmp/pkg/assets/build/index.html
  touch tilt.tmp/.patched
  mv tilt.tmp tilt
fi
if [ ! -f .tidy-done ]; then
  echo "tilt $TILT: resolving modules"
  cat > go.mod <<MOD
module shoal.local/tiltbuild

go 1.25.5

require github.com/tilt-dev/tilt $TILT

// tilt itself: the copy with the placeholder web page
replace github.com/tilt-dev/tilt => ./tilt

// The same two replace directives as tilt's own go.mod (they do not apply to a dependency).
replace github.com/emicklei/go-restful/v3 => github.com/emicklei/go-restful/v3 v3.9.0

replace github.com/pkg/browser => github.com/tilt-dev/browser v0.0.1
MOD
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/tilt-dev/tilt/cmd/tilt"
GO
  # Seed go.sum with the checksums tilt ships for its own tilt-dev/* pseudo-versions (the checksum database
  # does not answer for some of them). Only those: other lines of tilt's go.sum can disagree with what the
  # checksum database recorded first.
  grep '^github.com/tilt-dev/' tilt/go.sum > go.sum
  go mod tidy
  touch .tidy-done
fi
if [ "${1:-}" = "--resolve-only" ]; then echo "tilt $TILT: modules resolved"; exit 0; fi
echo "tilt $TILT: building (first build takes many minutes on 2 cores; resumable)"
start=$(date +%s)
go build -p "${SHOAL_GO_PARALLEL:-1}" -tags tools -ldflags "-s -w -X main.version=${TILT#v}" \
  -o "$BIN/tilt.tmp" github.com/tilt-dev/tilt/cmd/tilt
mv "$BIN/tilt.tmp" "$BIN/tilt"
echo "tilt $TILT: built in $(( $(date +%s) - start ))s"
echo "$BIN/tilt"
