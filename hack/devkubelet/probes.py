"""Container probes: httpGet, tcpSocket and exec, with the kubelet's success rules.

httpGet succeeds on a status from 200 to 399 (HTTPS is not verified, as in the kubelet); tcpSocket
when the connection opens; exec when the command, run inside the container's mount namespace with
its environment, exits 0. gRPC probes are not supported and always fail with a message saying so.
Probes connect only to loopback addresses: the pod IP (always one), or a `host` that is a 127.x.y.z
address or `localhost`; any other `host` fails the probe with a message saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from devkubelet.ipam import LOOPBACK
from devkubelet.kube import Obj

USER_AGENT = "kube-probe/1.34 (pallas dev-kubelet)"


@dataclass(frozen=True)
class ProbeTarget:
    """Where a container can be reached."""

    pod_ip: str
    ports: Mapping[str, int]
    pid: int
    env: Mapping[str, str]


def resolve_port(port: object, ports: Mapping[str, int]) -> int:
    """A probe port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    text = str(port)
    if text.isdigit():
        return int(text)
    if text in ports:
        return ports[text]
    raise ValueError(f"port {text!r} is not a named port of the container")


def probe_host(spec: Obj, target: ProbeTarget) -> str:
    """The address to probe: the pod IP unless `host` is set, and always within 127.0.0.0/8."""
    host = str(spec.get("host") or target.pod_ip)
    if host == "localhost":
        return "127.0.0.1"
    try:
        loopback = ipaddress.ip_address(host) in LOOPBACK
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"probe host {host!r} is not a loopback address (the dev kubelet connects only there)"
        )
    return host


async def run_probe(probe: Obj, target: ProbeTarget) -> tuple[bool, str]:
    """(success, failure message) for one probe attempt."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            return await asyncio.wait_for(_http_get(probe["httpGet"], target), timeout)
        if "tcpSocket" in probe:
            return await asyncio.wait_for(_tcp(probe["tcpSocket"], target), timeout)
        if "exec" in probe:
            return await _exec(probe["exec"], target, limit=timeout)
    except TimeoutError:
        return False, f"timeout after {timeout:g}s"
    except (OSError, ValueError) as e:
        return False, str(e) or type(e).__name__
    return False, "this probe handler is not supported by the dev kubelet (httpGet, tcpSocket, exec only)"


async def _http_get(spec: Obj, target: ProbeTarget) -> tuple[bool, str]:
    host = probe_host(spec, target)
    port = resolve_port(spec.get("port"), target.ports)
    path = str(spec.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    context = None
    if str(spec.get("scheme", "HTTP")).upper() == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers = {"Host": f"{host}:{port}", "User-Agent": USER_AGENT, "Accept": "*/*", "Connection": "close"}
    for header in spec.get("httpHeaders") or []:
        headers[str(header["name"])] = str(header["value"])
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    try:
        request = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(request.encode("latin-1"))
        await writer.drain()
        status_line = (await reader.readline()).decode("latin-1").split()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if len(status_line) < 2 or not status_line[1].isdigit():
        return False, f"invalid HTTP response from {host}:{port}{path}"
    code = int(status_line[1])
    if 200 <= code < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {code}"


async def _tcp(spec: Obj, target: ProbeTarget) -> tuple[bool, str]:
    host = probe_host(spec, target)
    port = resolve_port(spec.get("port"), target.ports)
    _, writer = await asyncio.open_connection(host, port)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True, ""


async def _exec(spec: Obj, target: ProbeTarget, *, limit: float) -> tuple[bool, str]:
    command = [str(c) for c in spec.get("command") or []]
    if not command:
        return False, "exec probe without a command"
    # nsenter into the container's mount namespace so the command sees the container's volumes.
    proc = await asyncio.create_subprocess_exec(
        "nsenter",
        f"--target={target.pid}",
        "--mount",
        "--",
        *command,
        env=dict(target.env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return False, f"command timed out after {limit:g}s"
    if proc.returncode == 0:
        return True, ""
    return False, f"command exited {proc.returncode}: {output.decode(errors='replace').strip()[:200]}"
