#!/usr/bin/env bash
# Builds Jaeger (the v2 backend, `github.com/jaegertracing/jaeger/cmd/jaeger`: OTLP in, the
# query API out, traces in memory) from the Go module proxy into a cache outside the repo, keyed
# by the pinned inputs. The tests read traces back from it (tests/support/jaeger.py); nothing of
# the product needs it. A second run with the cache complete returns in well under a second.
#
# The committed module files hack/build/jaeger/{go.mod,go.sum,tools.go} pin every module of the
# build with its hash; the build reads only those (-mod=readonly: nothing is resolved, every
# download is checked against go.sum). `--relock` re-resolves them after JAEGER_VERSION changes.
# Why build instead of download: these machines reach only package registries; the Go module
# proxy is one (as for hack/build/k8s-bins.sh).
set -euo pipefail

# Jaeger's Go module keeps v1 version numbers; v1.76.0 is the Jaeger v2 release of that month.
JAEGER_VERSION="v1.76.0"
MODULE="github.com/jaegertracing/jaeger"
LOCKS="$(cd "$(dirname "$0")" && pwd)/jaeger"
CACHE_ROOT="${PALLAS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pallas}"
BIN_DIR="$CACHE_ROOT/jaeger/$JAEGER_VERSION"
WORK_DIR="$CACHE_ROOT/jaeger-build"
STAMP="$BIN_DIR/.complete"
RECIPE=1
expected_stamp="jaeger=$JAEGER_VERSION recipe=$RECIPE locks=$(cat "$LOCKS/go.mod" "$LOCKS/go.sum" "$LOCKS/tools.go" \
  | sha256sum | cut -c1-16)"

die() { echo "hack/build/jaeger.sh: $*" >&2; exit 1; }

cache_complete() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$expected_stamp" && -x "$BIN_DIR/jaeger" ]]; }

relock() {
  command -v go >/dev/null || die "the Go toolchain is not on PATH; it is needed to re-resolve the module files"
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod
  local mod="$WORK_DIR/relock"
  rm -rf "$mod"; mkdir -p "$mod"; cd "$mod"
  go mod init local.invalid/jaeger-bin >/dev/null 2>&1
  printf '//go:build tools\n\n// Package tools names the command hack/build/jaeger.sh builds, so go mod tidy pins its modules.\npackage tools\n\nimport (\n\t_ "%s/cmd/jaeger"\n)\n' "$MODULE" >tools.go
  go get "$MODULE@$JAEGER_VERSION"
  # The go line Jaeger's own go.mod asks for, not this toolchain's (older Go still builds it).
  go mod edit -go="$(sed -n 's/^go //p' "$(go mod download -json "$MODULE@$JAEGER_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')")"
  go mod tidy
  mkdir -p "$LOCKS"
  cp go.mod go.sum tools.go "$LOCKS/"
  echo "hack/build/jaeger.sh: pinned $MODULE@$JAEGER_VERSION in $LOCKS" >&2
}

if [[ "${1:-}" == "--print-dir" ]]; then echo "$BIN_DIR"; exit 0; fi
if [[ "${1:-}" == "--relock" ]]; then relock; exit 0; fi
[[ $# -eq 0 ]] || die "usage: hack/build/jaeger.sh [--print-dir | --relock]"
if cache_complete; then echo "$BIN_DIR"; exit 0; fi

command -v go >/dev/null || die "the Go toolchain (go ≥ 1.24) is not on PATH; install Go to build Jaeger"
grep -qE "^[[:space:]]*(require[[:space:]]+)?$MODULE $JAEGER_VERSION( |\$)" "$LOCKS/go.mod" \
  || die "$LOCKS/go.mod does not require $MODULE $JAEGER_VERSION: run hack/build/jaeger.sh --relock"
mkdir -p "$BIN_DIR" "$WORK_DIR"
# Two test runs may start at once; the second waits for the first instead of building twice.
exec 9>"$BIN_DIR/.lock"
flock 9
if cache_complete; then echo "$BIN_DIR"; exit 0; fi
rm -f "$STAMP"
mod="$WORK_DIR/module"
rm -rf "$mod"; mkdir -p "$mod"
cp "$LOCKS/go.mod" "$LOCKS/go.sum" "$LOCKS/tools.go" "$mod/"
echo "hack/build/jaeger.sh: building Jaeger $JAEGER_VERSION into $BIN_DIR (about 5 minutes cold on 2 cores)" >&2
( cd "$mod" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly \
    go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/.jaeger.partial" "$MODULE/cmd/jaeger" ) \
  || die "building Jaeger $JAEGER_VERSION failed (see output above)"
# Renamed into place only once whole, so an interrupted build never leaves half a binary.
mv -f "$BIN_DIR/.jaeger.partial" "$BIN_DIR/jaeger"
echo "$expected_stamp" >"$STAMP"
echo "$BIN_DIR"
