#!/usr/bin/env bash
# Builds the binaries of the local cluster's add-ons from the Go module proxy into a cache outside
# the repo keyed by the pinned inputs, the way hack/build/k8s-bins.sh builds Kubernetes:
#   prometheus-operator, prometheus-config-reloader   github.com/prometheus-operator/prometheus-operator
#   prometheus                                        github.com/prometheus/prometheus (v3.5.0 LTS)
#   kube-network-policies                             sigs.k8s.io/kube-network-policies
# and copies the Prometheus Operator's CRDs (example/prometheus-operator-crd/*.yaml of the same,
# hash-checked module) and the ClusterRoles of the operator and of Prometheus (example/rbac/)
# beside them. A second run with the cache complete returns at once. Prints
# the cache dir. (Debian's prometheus, which system-deps.sh installs for promtool, is built
# without Kubernetes service discovery: it refuses the configuration the operator writes.)
#
# Why build instead of download: these machines reach only package registries; the Go module
# proxy is one, and no container registry is reachable. See docs/local-kubernetes.md, "Add-ons".
set -euo pipefail

# The versions, and the committed Go module files that pin every module of each build with its
# hash (hack/build/cluster-addons/<name>/go.mod, go.sum, tools.go). A build reads only those
# (-mod=readonly: nothing is resolved, every download is checked against go.sum); `--relock`
# re-resolves them after a version here changes.
PROMETHEUS_OPERATOR_VERSION="v0.85.0"
NETWORK_POLICIES_VERSION="v0.8.0"
# Prometheus v3.5.0 (the LTS release, and the Prometheus Operator's default): its Go module
# numbers releases v0.<major><minor>.<patch>.
PROMETHEUS_VERSION="v3.5.0"
PROMETHEUS_MODULE_VERSION="v0.305.0"
HERE="$(cd "$(dirname "$0")" && pwd)"
LOCKS="$HERE/cluster-addons"
CACHE_ROOT="${PALLAS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pallas}"
WORK_DIR="$CACHE_ROOT/cluster-addons-build"
BINARIES=(prometheus-operator prometheus-config-reloader prometheus kube-network-policies)
# The cache is keyed by the pinned inputs alone: the versions, the module files, the patch and
# this recipe; a change of any of them builds into a new folder.
RECIPE=2
inputs_hash="$({ echo "po=$PROMETHEUS_OPERATOR_VERSION knp=$NETWORK_POLICIES_VERSION recipe=$RECIPE"
  echo "prometheus=$PROMETHEUS_VERSION/$PROMETHEUS_MODULE_VERSION"
  cat "$LOCKS"/*/go.mod "$LOCKS"/*/go.sum "$LOCKS"/*/tools.go "$LOCKS"/*/*.patch 2>/dev/null || true; } \
  | sha256sum | cut -c1-16)"
OUT_DIR="$CACHE_ROOT/cluster-addons/$inputs_hash"
STAMP="$OUT_DIR/.complete"

die() { echo "hack/build/cluster-addons.sh: $*" >&2; exit 1; }
say() { echo "hack/build/cluster-addons.sh: $*" >&2; }

cache_complete() {
  [[ -f "$STAMP" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$OUT_DIR/$b" ]] || return 1; done
  compgen -G "$OUT_DIR/crds/*.yaml" >/dev/null && compgen -G "$OUT_DIR/rbac/*.yaml" >/dev/null
}

# --- --relock: re-resolve hack/build/cluster-addons/<name>/ (needs the module proxy) ------------

# A scratch module whose tools.go imports the packages $3..., requiring module $2 (module@version).
# Replace directives of that module's own go.mod are copied: a local one (`=> ./pkg/x`, a
# module published from the same repository at the same tag) as that module at the same
# version, any other as it is. go mod tidy completes go.mod and go.sum, copied to $LOCKS/$1.
relock_module() {
  local name="$1" module="$2"; shift 2
  local mod="$WORK_DIR/relock-$name" path="${module%@*}" version="${module#*@}"
  rm -rf "$mod"; mkdir -p "$mod"; cd "$mod"
  go mod init "local.invalid/$name-bin" >/dev/null 2>&1
  go mod edit -go=1.24.0
  {
    printf '//go:build tools\n\n// Package tools names the commands hack/build/cluster-addons.sh builds, so go mod tidy pins their modules.\npackage tools\n\nimport (\n'
    local pkg; for pkg in "$@"; do printf '\t_ "%s"\n' "$pkg"; done
    printf ')\n'
  } >tools.go
  local gomod line old new
  gomod="$(go mod download -json "$module" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  while read -r line; do
    [[ -n "$line" ]] || continue
    old="${line%%=>*}" new="${line#*=>}"
    old="$(echo "$old" | xargs)" new="$(echo "$new" | xargs)"
    if [[ "$new" == ./* || "$new" == ../* ]]; then
      go mod edit -replace="${old%% *}=${old%% *}@$version"
    else
      go mod edit -replace="${old// /@}=${new// /@}"
    fi
  done < <(python3 - "$gomod" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
lines = [m for m in re.findall(r"^replace\s+(\S.*)$", text, re.M) if not m.startswith("(")]
for block in re.findall(r"^replace\s*\((.*?)^\)", text, re.M | re.S):
    lines += [l.split("//")[0].strip() for l in block.splitlines() if l.split("//")[0].strip()]
print("\n".join(lines))
PY
)
  go get "$module"
  go mod tidy
  mkdir -p "$LOCKS/$name"
  cp go.mod go.sum tools.go "$LOCKS/$name/"
  say "pinned $module in $LOCKS/$name"
}

relock() {
  command -v go >/dev/null || die "the Go toolchain is not on PATH; it is needed to re-resolve the module files"
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod
  mkdir -p "$WORK_DIR"
  ( relock_module prometheus-operator \
      "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
      github.com/prometheus-operator/prometheus-operator/cmd/operator \
      github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader )
  ( relock_module prometheus "github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION" \
      github.com/prometheus/prometheus/cmd/prometheus )
  ( relock_module kube-network-policies "sigs.k8s.io/kube-network-policies@$NETWORK_POLICIES_VERSION" \
      sigs.k8s.io/kube-network-policies/cmd )
}

if [[ "${1:-}" == "--print-dir" ]]; then echo "$OUT_DIR"; exit 0; fi
if [[ "${1:-}" == "--relock" ]]; then relock; exit 0; fi
[[ $# -eq 0 ]] || die "usage: hack/build/cluster-addons.sh [--print-dir | --relock]"
if cache_complete; then echo "$OUT_DIR"; exit 0; fi

command -v go >/dev/null || die "the Go toolchain (go ≥ 1.24) is not on PATH; install Go to build the add-ons"
mkdir -p "$OUT_DIR" "$WORK_DIR"
tmp_out="$OUT_DIR/.partial"
rm -rf "$tmp_out"; mkdir -p "$tmp_out"

# Only the committed module files: no go get, no go mod tidy. -mod=readonly fails if they would
# need a change, and every module download is checked against go.sum.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

# Enter a copy of hack/build/cluster-addons/$1 in $WORK_DIR, after checking that it requires $2 at $3.
enter_module() {
  local name="$1" module="$2" version="$3"
  grep -qE "^[[:space:]]*(require[[:space:]]+)?$module $version( |\$)" "$LOCKS/$name/go.mod" \
    || die "$LOCKS/$name/go.mod does not require $module $version: run hack/build/cluster-addons.sh --relock"
  local mod="$WORK_DIR/$name"
  rm -rf "$mod"; mkdir -p "$mod"
  cp "$LOCKS/$name/go.mod" "$LOCKS/$name/go.sum" "$LOCKS/$name/tools.go" "$mod/"
  cd "$mod"
}

# The directory of a module of the build, downloaded and checked against the committed go.sum.
module_dir() {
  go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))'
}

build_prometheus_operator() {
  enter_module prometheus-operator github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION"
  local v="${PROMETHEUS_OPERATOR_VERSION#v}" p=github.com/prometheus/common/version
  # The version the operator logs and labels its objects with (its Makefile sets the same).
  local ldflags="-s -w -X $p.Version=$v -X $p.Revision=$PROMETHEUS_OPERATOR_VERSION -X $p.Branch=release"
  ldflags+=" -X $p.BuildUser=pallas -X $p.BuildDate=19700101-00:00:00"
  go build -trimpath -ldflags "$ldflags" -o "$tmp_out/prometheus-operator" \
    github.com/prometheus-operator/prometheus-operator/cmd/operator
  go build -trimpath -ldflags "$ldflags" -o "$tmp_out/prometheus-config-reloader" \
    github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader
  local src
  src="$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")"
  mkdir -p "$tmp_out/crds"
  cp "$src"/example/prometheus-operator-crd/monitoring.coreos.com_*.yaml "$tmp_out/crds/"
  mkdir -p "$tmp_out/rbac"
  cp "$src"/example/rbac/prometheus-operator/prometheus-operator-cluster-role.yaml \
    "$src"/example/rbac/prometheus/prometheus-cluster-role.yaml "$tmp_out/rbac/"
  chmod 0644 "$tmp_out"/crds/*.yaml "$tmp_out"/rbac/*.yaml
}

build_prometheus() {
  enter_module prometheus github.com/prometheus/prometheus "$PROMETHEUS_MODULE_VERSION"
  local v="${PROMETHEUS_VERSION#v}" p=github.com/prometheus/common/version
  local ldflags="-s -w -X $p.Version=$v -X $p.Revision=$PROMETHEUS_VERSION -X $p.Branch=release"
  ldflags+=" -X $p.BuildUser=pallas -X $p.BuildDate=19700101-00:00:00"
  # Without the `builtinassets` tag: the web UI (built with npm upstream) is left out; the HTTP
  # API, which is what the tests and the demo read, is all there.
  go build -trimpath -ldflags "$ldflags" -o "$tmp_out/prometheus" github.com/prometheus/prometheus/cmd/prometheus
}

build_network_policies() {
  enter_module kube-network-policies sigs.k8s.io/kube-network-policies "$NETWORK_POLICIES_VERSION"
  # The module as published queues packets with nftables' `queue` expression, which needs a
  # kernel with CONFIG_NFT_QUEUE; these machines' kernels lack it. The patch queues the same
  # packets to the same nfnetlink queue with the xtables NFQUEUE target through nft_compat
  # (CONFIG_NETFILTER_XT_TARGET_NFQUEUE, CONFIG_NFT_COMPAT). The module's sources come from
  # the module cache as go.sum verified them (go mod vendor); the patch is applied to that copy.
  GOFLAGS= go mod vendor
  ( cd vendor/sigs.k8s.io/kube-network-policies && patch -p1 --quiet --forward <"$LOCKS/kube-network-policies/nfqueue-xt-target.patch" ) \
    || die "the kube-network-policies patch does not apply to $NETWORK_POLICIES_VERSION"
  go build -mod=vendor -trimpath -ldflags "-s -w" -o "$tmp_out/kube-network-policies" \
    sigs.k8s.io/kube-network-policies/cmd
}

say "building into $OUT_DIR (a cold build takes several minutes on 2 cores)"
( build_prometheus_operator ) || die "building the Prometheus Operator $PROMETHEUS_OPERATOR_VERSION failed (see above)"
( build_prometheus ) || die "building Prometheus $PROMETHEUS_VERSION failed (see above)"
( build_network_policies ) || die "building kube-network-policies $NETWORK_POLICIES_VERSION failed (see above)"
# Moved in one by one and stamped last, so an interrupted build never leaves a half-written file
# under its final name.
rm -rf "$OUT_DIR/crds" "$OUT_DIR/rbac"
for b in "${BINARIES[@]}" crds rbac; do mv -f "$tmp_out/$b" "$OUT_DIR/$b"; done
rmdir "$tmp_out"
# Only the newest inputs are kept.
for old in "$CACHE_ROOT"/cluster-addons/*; do
  [[ "$old" == "$OUT_DIR" ]] || rm -rf "$old"
done
touch "$STAMP"
echo "$OUT_DIR"
