#!/usr/bin/env bash
# Builds the local Kubernetes binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, the node's kubelet and kube-proxy, CoreDNS, helm) from the Go module proxy into a version-stamped cache outside the
# repo. A second run with the cache complete returns in well under a second.
#
# Why build instead of download: these machines reach only package registries; the Go module
# proxy is one. See docs/local-kubernetes.md.
set -euo pipefail

K8S_VERSION="${PALLAS_K8S_VERSION:-v1.34.10}"
ETCD_VERSION="${PALLAS_ETCD_VERSION:-v3.6.4}"
HELM_VERSION="${PALLAS_HELM_VERSION:-v3.19.5}"
COREDNS_VERSION="${PALLAS_COREDNS_VERSION:-v1.12.4}"
CACHE_ROOT="${PALLAS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pallas}"
BIN_DIR="$CACHE_ROOT/k8s-bins/$K8S_VERSION"
WORK_DIR="$CACHE_ROOT/k8s-build"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy coredns helm)
STAMP="$BIN_DIR/.complete"
expected_stamp="k8s=$K8S_VERSION etcd=$ETCD_VERSION helm=$HELM_VERSION coredns=$COREDNS_VERSION"

die() { echo "build-k8s-bins: $*" >&2; exit 1; }

cache_complete() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$expected_stamp" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

if [[ "${1:-}" == "--print-dir" ]]; then echo "$BIN_DIR"; exit 0; fi
if cache_complete; then echo "$BIN_DIR"; exit 0; fi

if [[ -f "$STAMP" ]] || compgen -G "$BIN_DIR/*" >/dev/null; then
  echo "build-k8s-bins: cache at $BIN_DIR is incomplete; rebuilding the missing pieces" >&2
fi
command -v go >/dev/null || die "the Go toolchain (go ≥ 1.24) is not on PATH; install Go to build the control-plane binaries"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$BIN_DIR" "$WORK_DIR"
rm -f "$STAMP"
tmp_out="$BIN_DIR/.partial"
mkdir -p "$tmp_out"

build_kubernetes() {
  local mod="$WORK_DIR/kubernetes-$K8S_VERSION"
  mkdir -p "$mod"
  cd "$mod"
  # Start from a clean go.mod each time: the replace list is derived, never accumulated.
  rm -f go.mod go.sum
  go mod init local.invalid/k8s-bins >/dev/null 2>&1
  go mod edit -go=1.24.0
  # k8s.io/kubernetes replaces every staging module with ./staging/...; v0.X.Y of each published
  # staging module is Kubernetes v1.X.Y, so replace each with that version (kubernetes#79384).
  local staging_version="v0.${K8S_VERSION#v1.}"
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  local m
  # Only the staging modules are required at exactly v0.0.0; k8s.io/utils and friends carry
  # pseudo-versions (v0.0.0-2025...) and must keep them.
  for m in $(grep -E '^\s*k8s\.io/[a-z0-9-]+ v0\.0\.0\s*$' "$gomod" | awk '{print $1}' | sort -u); do
    go mod edit -replace="$m=$m@$staging_version"
  done
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
  go mod tidy
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w" p
  # Without the stamp /version says v0.0.0-master, which kubectl and clients reading /version dislike.
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags="$ldflags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  go build -trimpath -ldflags "$ldflags" -o "$tmp_out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
}

# Enter a Go module of its own in $WORK_DIR (name $1, version $2) that requires module $3 at $2.
go_module() {
  local mod="$WORK_DIR/$1-$2"
  mkdir -p "$mod"
  cd "$mod"
  [[ -f go.mod ]] || go mod init "local.invalid/$1-bin" >/dev/null 2>&1
  go get "$3@$2"
}

build_etcd() {
  go_module etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3
  go build -trimpath -ldflags "-s -w" -o "$tmp_out/etcd" go.etcd.io/etcd/server/v3
}

build_helm() {
  go_module helm "$HELM_VERSION" helm.sh/helm/v3
  go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    -o "$tmp_out/helm" helm.sh/helm/v3/cmd/helm
}

build_coredns() {
  go_module coredns "$COREDNS_VERSION" github.com/coredns/coredns
  go build -trimpath -ldflags "-s -w" -o "$tmp_out/coredns" github.com/coredns/coredns
}

need() { [[ -x "$BIN_DIR/$1" ]] && return 1 || return 0; }

echo "build-k8s-bins: building into $BIN_DIR (a cold build takes 20-40 minutes on 2 cores)" >&2
if need etcd; then ( build_etcd ) || die "building etcd $ETCD_VERSION failed (see output above)"; fi
if need helm; then ( build_helm ) || die "building helm $HELM_VERSION failed (see output above)"; fi
if need coredns; then ( build_coredns ) || die "building CoreDNS $COREDNS_VERSION failed (see output above)"; fi
if need kube-apiserver || need kube-controller-manager || need kube-scheduler || need kubectl \
  || need kubelet || need kube-proxy; then
  ( build_kubernetes ) || die "building Kubernetes $K8S_VERSION failed (see output above)"
fi
# Move finished binaries in one by one so an interrupted build never leaves a half-written binary
# under its final name.
for b in "${BINARIES[@]}"; do
  if [[ -f "$tmp_out/$b" ]]; then mv -f "$tmp_out/$b" "$BIN_DIR/$b"; fi
done
rmdir "$tmp_out" 2>/dev/null || true
for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || die "$b is missing from $BIN_DIR after the build"; done
echo "$expected_stamp" > "$STAMP"
echo "$BIN_DIR"
