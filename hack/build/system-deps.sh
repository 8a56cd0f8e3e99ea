#!/usr/bin/env bash
# Installs the Debian packages the tests and the local node need, when a command they provide is
# missing (a NEEDS entry is a command name, or an absolute path glob that must match an executable):
#   promtool              (prometheus: `promtool check metrics`; the prometheus server is used later)
#   initdb                (postgresql: throw-away PostgreSQL servers for the conversation-store tests;
#                          not on PATH, so it is looked for under /usr/lib/postgresql/*/bin)
#   containerd, ctr       (containerd: the node's container runtime, CRI v1)
#   runc                  (runc: crun refuses the hybrid cgroup hierarchy these machines have)
#   /usr/lib/cni/bridge   (containernetworking-plugins: bridge, host-local, loopback)
#   buildah               (buildah: builds the project's Dockerfile without a daemon)
#   debootstrap           (debootstrap: the Debian base of the locally built images)
#   iptables              (iptables: kube-proxy's iptables mode)
#   nft                   (nftables: the node's network guard, docs/local-kubernetes.md)
#   catatonit             (catatonit: the pause process of the locally built sandbox image)
# Idempotent and instant when every command is present: it then exits 0 without touching apt.
# Otherwise it runs `apt-get update` once and installs only the missing packages, without
# recommended extras and without prompts. Services shipped by a package are never started
# (an existing /usr/sbin/policy-rc.d is respected; without one a temporary deny-all one is used).
# Needs root to install; a non-root user without the commands gets one line on stderr and exit 1.
#
# These float within Debian 12 (point releases and security updates): the archive serves only
# each package's current version, so a `pkg=version` pin would break at the next security update
# (docs/local-kubernetes.md, Pinned inputs). `--versions` prints what is installed, one
# `package version` line each, so a run's log records exactly what it used (.ci/run prints it).
set -euo pipefail

# command | Debian package that provides it
NEEDS=(
  "promtool|prometheus"
  "/usr/lib/postgresql/*/bin/initdb|postgresql"
  "containerd|containerd"
  "runc|runc"
  "/usr/lib/cni/bridge|containernetworking-plugins"
  "buildah|buildah"
  "debootstrap|debootstrap"
  "iptables|iptables"
  "nft|nftables"
  "catatonit|catatonit"
)

present() {  # a command on PATH, or a path glob that matches an executable
  if [[ $1 == /* ]]; then compgen -G "$1" >/dev/null; else command -v "$1" >/dev/null 2>&1; fi
}

if [[ "${1:-}" == "--versions" ]]; then
  for need in "${NEEDS[@]}"; do
    IFS='|' read -r _ pkg <<<"$need"
    printf '%s %s\n' "$pkg" "$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo '(not installed)')"
  done
  exit 0
fi
[[ $# -eq 0 ]] || { echo "usage: hack/build/system-deps.sh [--versions]" >&2; exit 2; }

missing=()
for need in "${NEEDS[@]}"; do
  IFS='|' read -r cmd pkg <<<"$need"
  present "$cmd" || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ "$(id -u)" -ne 0 ]]; then
  echo "system-deps: missing Debian package(s) ${missing[*]}; run as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
command -v apt-get >/dev/null 2>&1 \
  || { echo "system-deps: apt-get not found; install ${missing[*]} with this system's package manager" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
if [[ ! -e "$policy" ]]; then
  # Keep maintainer scripts from starting daemons (prometheus would listen on every interface).
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

echo "system-deps: installing ${missing[*]}" >&2
# apt's progress goes to stderr so the caller's stdout stays clean.
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confdef \
  -o Dpkg::Options::=--force-confold "${missing[@]}" >&2

for need in "${NEEDS[@]}"; do
  IFS='|' read -r cmd pkg <<<"$need"
  present "$cmd" || { echo "system-deps: $pkg installed but $cmd is still missing" >&2; exit 1; }
done
