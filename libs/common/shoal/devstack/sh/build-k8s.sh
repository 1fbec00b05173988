#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from the Go module proxy.
# Resumable: each binary is built once; the Go module and build caches live in the cache dir.
set -euo pipefail
CACHE=${SHOAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal}
mkdir -p "$CACHE"
# One builder at a time per part: a second run waits for the first, then finds the cache warm.
exec 9>"$CACHE/.k8s.lock"
flock -n 9 || { echo "k8s: another build is running; waiting for it"; flock 9; }
K8S=${SHOAL_K8S_VERSION:-v1.36.3}
STAGING=v0${K8S#v1}
BIN=$CACHE/bin/k8s-$K8S
WRAP=$CACHE/src/k8s-$K8S
export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOFLAGS=-buildvcs=false CGO_ENABLED=0
mkdir -p "$BIN" "$WRAP"
want=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
missing=()
for b in "${want[@]}"; do [ -x "$BIN/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then echo "k8s $K8S: cached in $BIN"; exit 0; fi
cd "$WRAP"
if [ ! -f go.sum ] || [ ! -f .tidy-done ]; then
  echo "k8s $K8S: resolving modules (staging $STAGING)"
  staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider cluster-bootstrap
    code-generator component-base component-helpers controller-manager cri-api cri-client csi-translation-lib
    dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy
    kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin
    sample-controller cri-streaming streaming"
  {
    echo "module shoal.local/k8sbuild"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $K8S"
    echo
    for m in $staging; do echo "replace k8s.io/$m => k8s.io/$m $STAGING"; done
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  go mod tidy
  touch .tidy-done
fi
minor=${K8S#v1.}; minor=${minor%%.*}
ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
for b in "${missing[@]}"; do
  echo "k8s $K8S: building $b (first build takes minutes; resumable)"
  go build -p 2 -tags tools -ldflags "$ld" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv "$BIN/$b.tmp" "$BIN/$b"
done
echo "k8s $K8S: built in $BIN"
