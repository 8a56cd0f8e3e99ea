#!/usr/bin/env bash
# Builds the local Kubernetes binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, the node's kubelet and kube-proxy, CoreDNS, helm) from the Go module
# proxy into a cache outside the repo keyed by the pinned inputs. A second run with the cache
# complete returns in well under a second.
#
# Why build instead of download: these machines reach only package registries; the Go module
# proxy is one. See docs/local-kubernetes.md.
set -euo pipefail

# The versions, and the committed Go module files that pin every module of each build with its
# hash (hack/build/k8s-bins/<name>/go.mod, go.sum, tools.go). A build reads only those (-mod=readonly:
# nothing is resolved, every download is checked against go.sum); `--relock` re-resolves them
# after a version here changes.
K8S_VERSION="v1.34.10"
ETCD_VERSION="v3.6.4"
HELM_VERSION="v3.19.5"
COREDNS_VERSION="v1.12.4"
LOCKS="$(cd "$(dirname "$0")" && pwd)/k8s-bins"
CACHE_ROOT="${PALLAS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pallas}"
BIN_DIR="$CACHE_ROOT/k8s-bins/$K8S_VERSION"
WORK_DIR="$CACHE_ROOT/k8s-build"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy coredns helm)
STAMP="$BIN_DIR/.complete"
INPUTS="$BIN_DIR/.inputs"
# The cache is keyed by the pinned inputs alone: the versions, the module files and this recipe.
RECIPE=2
expected_stamp="k8s=$K8S_VERSION etcd=$ETCD_VERSION helm=$HELM_VERSION coredns=$COREDNS_VERSION"
expected_stamp+=" recipe=$RECIPE locks=$({ cat "$LOCKS"/*/go.mod "$LOCKS"/*/go.sum "$LOCKS"/*/tools.go 2>/dev/null \
  || true; } | sha256sum | cut -c1-16)"

die() { echo "hack/build/k8s-bins.sh: $*" >&2; exit 1; }

cache_complete() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$expected_stamp" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

# --- --relock: re-resolve hack/build/k8s-bins/<name>/ from the versions above (needs the module proxy) --

# A scratch module in $WORK_DIR/relock-$1 whose tools.go imports the packages $3..., requiring
# module $2; go mod tidy completes go.mod and go.sum, which are copied to $LOCKS/$1.
relock_module() {
  local name="$1" module="$2"; shift 2
  local mod="$WORK_DIR/relock-$name"
  rm -rf "$mod"; mkdir -p "$mod"; cd "$mod"
  go mod init "local.invalid/$name-bin" >/dev/null 2>&1
  go mod edit -go=1.24.0
  {
    printf '//go:build tools\n\n// Package tools names the commands hack/build/k8s-bins.sh builds, so go mod tidy pins their modules.\npackage tools\n\nimport (\n'
    local pkg; for pkg in "$@"; do printf '\t_ "%s"\n' "$pkg"; done
    printf ')\n'
  } >tools.go
  if [[ "$name" == kubernetes ]]; then
    # k8s.io/kubernetes replaces every staging module with ./staging/...; v0.X.Y of each published
    # staging module is Kubernetes v1.X.Y, so replace each with that version (kubernetes#79384).
    # Only the staging modules are required at exactly v0.0.0; k8s.io/utils and friends carry
    # pseudo-versions (v0.0.0-2025...) and must keep them.
    local gomod m staging_version="v0.${K8S_VERSION#v1.}"
    gomod="$(go mod download -json "$module" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
    for m in $(grep -E '^\s*k8s\.io/[a-z0-9-]+ v0\.0\.0\s*$' "$gomod" | awk '{print $1}' | sort -u); do
      go mod edit -replace="$m=$m@$staging_version"
    done
    go mod edit -require="$module"
  else
    go get "$module"
  fi
  go mod tidy
  mkdir -p "$LOCKS/$name"
  cp go.mod go.sum tools.go "$LOCKS/$name/"
  echo "hack/build/k8s-bins.sh: pinned $module in $LOCKS/$name" >&2
}

relock() {
  command -v go >/dev/null || die "the Go toolchain is not on PATH; it is needed to re-resolve the module files"
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod
  mkdir -p "$WORK_DIR"
  ( relock_module kubernetes "k8s.io/kubernetes@$K8S_VERSION" k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy )
  ( relock_module etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3 )
  ( relock_module helm "helm.sh/helm/v3@$HELM_VERSION" helm.sh/helm/v3/cmd/helm )
  ( relock_module coredns "github.com/coredns/coredns@$COREDNS_VERSION" github.com/coredns/coredns )
}

if [[ "${1:-}" == "--print-dir" ]]; then echo "$BIN_DIR"; exit 0; fi
if [[ "${1:-}" == "--relock" ]]; then relock; exit 0; fi
[[ $# -eq 0 ]] || die "usage: hack/build/k8s-bins.sh [--print-dir | --relock]"
if cache_complete; then echo "$BIN_DIR"; exit 0; fi

command -v go >/dev/null || die "the Go toolchain (go ≥ 1.24) is not on PATH; install Go to build the control-plane binaries"
mkdir -p "$BIN_DIR" "$WORK_DIR"
if [[ "$(cat "$INPUTS" 2>/dev/null)" != "$expected_stamp" ]]; then
  # Binaries built from other inputs (another version, lock or recipe) are not kept.
  compgen -G "$BIN_DIR/*" >/dev/null && echo "hack/build/k8s-bins.sh: the pinned inputs changed; rebuilding" >&2
  rm -rf "${BINARIES[@]/#/$BIN_DIR/}" "$BIN_DIR/.partial"
  echo "$expected_stamp" >"$INPUTS"
elif compgen -G "$BIN_DIR/*" >/dev/null; then
  echo "hack/build/k8s-bins.sh: cache at $BIN_DIR is incomplete; building the missing pieces" >&2
fi
rm -f "$STAMP"
tmp_out="$BIN_DIR/.partial"
mkdir -p "$tmp_out"

# Only the committed module files: no go get, no go mod tidy. -mod=readonly fails if they would
# need a change, and every module download is checked against go.sum.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

# Enter a copy of hack/build/k8s-bins/$1 in $WORK_DIR, after checking that it requires module $2 at $3.
enter_module() {
  local name="$1" module="$2" version="$3"
  grep -qE "^[[:space:]]*(require[[:space:]]+)?$module $version( |\$)" "$LOCKS/$name/go.mod" \
    || die "$LOCKS/$name/go.mod does not require $module $version: run hack/build/k8s-bins.sh --relock"
  local mod="$WORK_DIR/$name"
  rm -rf "$mod"; mkdir -p "$mod"
  cp "$LOCKS/$name/go.mod" "$LOCKS/$name/go.sum" "$LOCKS/$name/tools.go" "$mod/"
  cd "$mod"
}

build_kubernetes() {
  enter_module kubernetes k8s.io/kubernetes "$K8S_VERSION"
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

build_etcd() {
  enter_module etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$tmp_out/etcd" go.etcd.io/etcd/server/v3
}

build_helm() {
  enter_module helm helm.sh/helm/v3 "$HELM_VERSION"
  go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    -o "$tmp_out/helm" helm.sh/helm/v3/cmd/helm
}

build_coredns() {
  enter_module coredns github.com/coredns/coredns "$COREDNS_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$tmp_out/coredns" github.com/coredns/coredns
}

need() { [[ -x "$BIN_DIR/$1" ]] && return 1 || return 0; }

echo "hack/build/k8s-bins.sh: building into $BIN_DIR (a cold build takes 20-40 minutes on 2 cores)" >&2
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
