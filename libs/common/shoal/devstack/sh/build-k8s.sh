#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet and kube-proxy from the Go
# module proxy. Resumable: each binary is built once (a cache holding some gets only the missing ones); the Go
# module and build caches live in the cache dir.
set -euo pipefail
. "$(dirname "$0")/common.sh"
one_builder k8s
K8S=${SHOAL_K8S_VERSION:-v1.36.3}
STAGING=v0${K8S#v1}
BIN=$CACHE/bin/k8s-$K8S
WRAP=$CACHE/src/k8s-$K8S
mkdir -p "$BIN" "$WRAP"
want=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
missing=()
for b in "${want[@]}"; do [ -x "$BIN/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then echo "k8s $K8S: cached in $BIN"; exit 0; fi
cd "$WRAP"
# tools.go imports every wanted command; the module graph is tidied again whenever that list changes (a cache
# tidied for fewer commands lacks go.sum lines for the new ones)
imports=$(printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${want[@]}")
if [ ! -f go.sum ] || [ "$(cat .tidy-done 2>/dev/null)" != "$imports" ]; then
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
  printf '//go:build tools\n\npackage tools\n\nimport (\n%s\n)\n' "$imports" > tools.go
  go mod tidy
  printf '%s' "$imports" > .tidy-done
fi
minor=${K8S#v1.}; minor=${minor%%.*}
ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
for b in "${missing[@]}"; do
  echo "k8s $K8S: building $b (first build takes minutes; resumable)"
  go build -p 2 -tags tools -ldflags "$ld" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv "$BIN/$b.tmp" "$BIN/$b"
done
echo "k8s $K8S: built in $BIN"
