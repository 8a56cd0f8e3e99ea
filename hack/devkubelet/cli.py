"""Command line of hack/dev-kubelet: options, pre-flight checks with one-line errors, signals."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from devkubelet import __doc__ as package_doc
from devkubelet.ipam import DEFAULT_POD_CIDR, check_pod_cidr
from devkubelet.kube import ApiError, Kube, Obj
from devkubelet.kubelet import DevKubelet, Options
from devkubelet.node import parse_taint
from devkubelet.procs import AlreadyRunning

REPO = Path(__file__).resolve().parents[2]
log = logging.getLogger("dev-kubelet")


class CliError(Exception):
    """A problem the user can act on, printed as one line."""


def cluster_dir() -> Path:
    return Path(os.environ.get("PALLAS_CLUSTER_DIR") or REPO / ".cluster").resolve()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hack/dev-kubelet",
        description=(package_doc or "").strip().splitlines()[0],
        epilog="See docs/dev-kubelet.md. Stop it with SIGINT or SIGTERM (a second one kills at once).",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="admin kubeconfig (default: $PALLAS_CLUSTER_DIR/kubeconfig, i.e. hack/cluster's)",
    )
    parser.add_argument(
        "--node-name", default="pallas-dev-node", help="the Node to register (default %(default)s)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="pod folders, logs and the process table (default: $PALLAS_CLUSTER_DIR, else <repo>/.cluster)",
    )
    parser.add_argument(
        "--hosts-file",
        type=Path,
        default=Path("/etc/hosts"),
        help="where Service names go (default %(default)s)",
    )
    parser.add_argument(
        "--default-entrypoint",
        default="pallas",
        help="the command of containers that set none, i.e. the image entrypoint (default %(default)s)",
    )
    parser.add_argument(
        "--pod-cidr",
        default=DEFAULT_POD_CIDR,
        help="range pod IPs come from; must lie inside 127.0.0.0/8 (default %(default)s)",
    )
    parser.add_argument(
        "--register-with-taints",
        action="append",
        default=[],
        metavar="KEY[=VALUE]:EFFECT",
        help="taint the node (repeatable), so only pods tolerating it land here",
    )
    return parser.parse_args(argv)


def build_options(args: argparse.Namespace) -> Options:
    """Check what can be checked before touching the cluster."""
    if os.geteuid() != 0:
        raise CliError("must run as root (mount namespaces, the hosts file)")
    default_dir = cluster_dir()
    kubeconfig = (args.kubeconfig or default_dir / "kubeconfig").resolve()
    if not kubeconfig.is_file():
        raise CliError(f"kubeconfig {kubeconfig} not found (start the control plane with `hack/cluster up`)")
    hosts: Path = args.hosts_file.resolve()
    writable = os.access(hosts, os.W_OK) if hosts.exists() else os.access(hosts.parent, os.W_OK)
    if not writable or not os.access(hosts.parent, os.W_OK):
        raise CliError(f"hosts file {hosts} is not writable (it and its folder must be; see --hosts-file)")
    try:
        network = check_pod_cidr(args.pod_cidr)
    except ValueError as e:
        raise CliError(str(e)) from None
    taints: list[Obj] = []
    for text in args.register_with_taints:
        try:
            taints.append(parse_taint(text))
        except ValueError as e:
            raise CliError(str(e)) from None
    state_dir = (args.state_dir or default_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    return Options(
        kubeconfig=kubeconfig,
        node=args.node_name,
        state_dir=state_dir,
        hosts_file=hosts,
        default_entrypoint=args.default_entrypoint,
        pod_cidr=str(network),
        taints=taints,
    )


async def serve(options: Options) -> None:
    try:
        kube = Kube(options.kubeconfig)
    except Exception as e:  # lightkube's ConfigError and YAML errors alike
        raise CliError(f"cannot use kubeconfig {options.kubeconfig}: {e}") from None
    try:
        try:
            await kube.request("GET", "/version", request_timeout=5)
        except (ApiError, OSError) as e:
            raise CliError(f"API server {kube.server} unreachable: {e}") from None
        kubelet = DevKubelet(options, kube)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if stop.is_set():
                log.warning("second signal: killing every container now")
                kubelet.force_kill()
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        try:
            await kubelet.run(stop)
        except AlreadyRunning as e:
            raise CliError(f"another dev-kubelet runs for node {options.node} (lock {e})") from None
    finally:
        await kube.close()


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s dev-kubelet %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    try:
        asyncio.run(serve(build_options(parse_args(argv))))
    except CliError as e:
        print(f"dev-kubelet: {e}", file=sys.stderr)
        return 1
    except ApiError as e:
        print(f"dev-kubelet: the API server refused a request: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"dev-kubelet: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # ^C before the signal handlers were installed: nothing runs yet
        return 130
    return 0
