"""Pod IPs: every pod gets a loopback address of its own (default range 127.1.0.0/16).

Every address of 127.0.0.0/8 already belongs to this machine (the kernel routes the whole block to
`lo`), so a pod's processes bind their ports on their own address with no route or interface to
set up, and no traffic for a pod ever leaves loopback. The range must lie inside 127.0.0.0/8; the
host's own address, 127.0.0.1, is never handed out (hostNetwork pods report it).

Addresses are handed out round-robin (a just-freed address is not reused at once, so a stale
hosts-file line or client never reaches the next pod), and an address some socket on this machine
is already bound to (another dev kubelet on the same range, a leftover process) is skipped.

The API server refuses loopback addresses in EndpointSlices and Endpoints, so those stay empty for
these pods; Service names are mapped from selectors and pod readiness instead (hosts.py).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from pathlib import Path

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
DEFAULT_POD_CIDR = "127.1.0.0/16"
HOST_IP = "127.0.0.1"


class PoolExhausted(Exception):
    """No free address is left in the range."""


TCP_LISTEN = "0A"


def check_pod_cidr(text: str) -> ipaddress.IPv4Network:
    """The pod range; ValueError (one line) unless it is an IPv4 range of 4+ addresses in 127.0.0.0/8."""
    try:
        network = ipaddress.IPv4Network(text)
    except ValueError as e:
        raise ValueError(f"--pod-cidr {text!r} is not an IPv4 range: {e}") from None
    if not network.subnet_of(LOOPBACK):
        raise ValueError(
            f"--pod-cidr {network} is outside 127.0.0.0/8: pod IPs must be loopback addresses "
            f"(default {DEFAULT_POD_CIDR})"
        )
    if network.num_addresses < 4:
        raise ValueError(f"--pod-cidr {network} is too small: it needs at least 4 addresses")
    return network


def bound_addresses() -> set[str]:
    """IPv4 addresses a local server socket is bound to: listening TCP, any UDP (from /proc/net).

    Connections in TIME_WAIT and the like are left out: they linger after a pod is gone and do not
    block a new bind.
    """
    found: set[str] = set()
    for table in ("tcp", "udp"):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or (table == "tcp" and fields[3] != TCP_LISTEN):
                continue
            hex_ip = fields[1].split(":")[0]
            # /proc/net prints the address as a host-order 32-bit number.
            found.add(socket.inet_ntoa(struct.pack("<I", int(hex_ip, 16))))
    return found


class PodIPs:
    """Allocation of pod addresses from one loopback network."""

    def __init__(self, cidr: str) -> None:
        self.network = check_pod_cidr(cidr)
        self._hosts = [str(ip) for ip in self.network.hosts() if str(ip) != HOST_IP]
        self._used: dict[str, str] = {}
        self._next = 0

    def allocate(self, owner: str, preferred: str | None = None) -> str:
        """An address for owner; preferred (the pod's address before a restart) when still free."""
        for ip, holder in self._used.items():
            if holder == owner:
                return ip
        busy = bound_addresses()
        if preferred and preferred not in self._used and self._contains(preferred) and preferred not in busy:
            self._used[preferred] = owner
            return preferred
        for _ in range(len(self._hosts)):
            ip = self._hosts[self._next]
            self._next = (self._next + 1) % len(self._hosts)
            if ip not in self._used and ip not in busy:
                self._used[ip] = owner
                return ip
        raise PoolExhausted(f"no free pod IP left in {self.network}")

    def release(self, ip: str) -> None:
        self._used.pop(ip, None)

    def _contains(self, ip: str) -> bool:
        try:
            addr = ipaddress.IPv4Address(ip)
        except ValueError:
            return False
        return (
            addr in self.network
            and ip != HOST_IP
            and addr not in (self.network.network_address, self.network.broadcast_address)
        )
