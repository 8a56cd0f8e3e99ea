"""Access-control benchmark: what checking callers adds to send_message. Prints figures; not a test.

    eval "$(hack/local/cluster env)"      # a running control plane, for kubernetes mode (else skipped)
    .venv/bin/python bench/access_bench.py [--requests 400] [--verifications 20000]

Three `pallas agent` processes run the same agent, pinned to CPU 0: open (`auth.mode: none`),
`kubernetes` (TokenReview + SubjectAccessReview against the local API server) and `oidc` (JWTs
of an issuer this process serves on loopback). One client session per agent sends
send_message calls round robin, so drift on a shared machine touches all three alike; the fake
LLM answers at once, so the figures are the agent's own costs. Each authenticated agent's
decision cache is warm after the warm-up (one review per token, then cache hits), which is what
a caller sending messages sees: overhead = P50(auth) - P50(open).

It also times the verifier alone in this process (`PallasVerifier.verify_token` on a warm
cache: digest, cache hit, AccessToken), the part of that overhead that is ours rather than
fastmcp's auth middleware.

Target (issue 11): ≤ 1 ms added at P50 with a warm decision cache.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pallas_api.config import AccessConfig  # noqa: E402
from pallas_runtime.auth.cache import DecisionCache  # noqa: E402
from pallas_runtime.auth.identity import Caller, Decision  # noqa: E402
from pallas_runtime.auth.provider import PallasVerifier  # noqa: E402
from pallas_runtime.metrics import RuntimeMetrics  # noqa: E402
from tests.support.fake_llm import FakeOpenAI, Text  # noqa: E402
from tests.support.mcp_peers import free_port  # noqa: E402
from tests.support.oidc import AUDIENCE, oidc_issuer  # noqa: E402

NAMESPACE = f"pallas-bench-{secrets.token_hex(3)}"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.3f} ms"


def kubectl(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def cluster_available() -> bool:
    if not shutil.which("kubectl") or not os.environ.get("KUBECONFIG"):
        return False
    return (
        subprocess.run(["kubectl", "get", "--raw", "/readyz"], capture_output=True, timeout=10).returncode
        == 0
    )


def kubernetes_identities(tmp: Path) -> tuple[Path, str]:
    """The agent's kubeconfig (an auth delegator) and a caller token allowed to invoke `bench`."""
    rbac = "rbac.authorization.k8s.io/v1"
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": NAMESPACE}}
          for n in ("agents", "caller")),
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:auth-delegator"},
         "subjects": [{"kind": "ServiceAccount", "name": "agents", "namespace": NAMESPACE}]},
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": "talk", "namespace": NAMESPACE},
         "rules": [{"apiGroups": ["pallas.dev"], "resources": ["pallasagents"], "resourceNames": ["bench"],
                    "verbs": ["invoke"]}]},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "talk", "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "talk"},
         "subjects": [{"kind": "ServiceAccount", "name": "caller", "namespace": NAMESPACE}]},
    ]  # fmt: skip
    kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))
    admin = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    cluster = admin["clusters"][0]
    token = kubectl("create", "token", "agents", "-n", NAMESPACE, "--duration=1h")
    path = tmp / "agents-kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "agents", "user": {"token": token}}],
                "contexts": [{"name": "agents", "context": {"cluster": cluster["name"], "user": "agents"}}],
                "current-context": "agents",
            }
        )
    )
    return path, kubectl("create", "token", "caller", "-n", NAMESPACE, "--duration=1h")


def agent_config(llm: FakeOpenAI, auth: dict[str, Any] | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "bench",
        "model": llm.models[0],
        "provider": {"name": "fake", "type": "openai", "baseURL": llm.base_url, "maxRetries": 0},
    }
    if auth is not None:
        config["auth"] = {
            "resource": "http://bench.bench.svc.cluster.local:8000/mcp",
            "namespace": NAMESPACE,
            **auth,
        }
    return config


@contextlib.asynccontextmanager
async def agent_process(config: dict[str, Any], tmp: Path, env: dict[str, str]) -> AsyncIterator[str]:
    path = tmp / f"{config.get('auth', {}).get('mode', 'none')}.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [sys.executable, "-m", "pallas_runtime.cli", "agent", "--config", str(path), "--port", str(port),
            "--host", "127.0.0.1"]  # fmt: skip
    if shutil.which("taskset"):
        argv = ["taskset", "-c", "0", *argv]
    full_env = {**os.environ, "PALLAS_LOG_LEVEL": "WARNING", "FASTMCP_CHECK_FOR_UPDATES": "off", **env}
    proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import httpx2

        async with httpx2.AsyncClient() as http:
            for _ in range(600):
                if proc.poll() is not None:
                    raise RuntimeError(f"agent ({path.name}) exited with {proc.returncode}")
                with contextlib.suppress(httpx2.HTTPError):
                    if (await http.get(f"http://127.0.0.1:{port}/readyz", timeout=1)).status_code == 200:
                        break
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def round_robin(clients: dict[str, Client[Any]], requests: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for n in range(20 + requests):  # the first 20 warm connections and decision caches up
        for name, client in clients.items():
            started = time.perf_counter()
            await client.call_tool("send_message", {"message": "hi"})
            if n >= 20:
                samples[name].append(time.perf_counter() - started)
    return samples


async def verifier_alone(verifications: int) -> list[float]:
    """µs per verify_token on a warm cache, in batches of 1000."""

    class Judge:
        access = AccessConfig()

        async def judge(self, token: str) -> Decision | None:
            return Decision(Caller("system:serviceaccount:bench:caller", ("system:serviceaccounts",)), True)

        async def aclose(self) -> None:
            return None

    verifier = PallasVerifier("bench", Judge(), DecisionCache(60), RuntimeMetrics(process_collectors=False))
    token = "eyJhbGciOiJSUzI1NiJ9." + "x" * 900 + ".sig"  # a ServiceAccount token is ~1 KB
    await verifier.verify_token(token)
    batches = []
    for _ in range(max(1, verifications // 1000)):
        started = time.perf_counter()
        for _ in range(1000):
            await verifier.verify_token(token)
        batches.append((time.perf_counter() - started) / 1000)
    assert AccessConfig()  # the access lists are not consulted on a cache hit
    return batches


async def main(args: argparse.Namespace) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # clients, fake LLM and issuer on the other core
    with tempfile.TemporaryDirectory(prefix="pallas-access-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        kube = cluster_available()
        try:
            agents_kubeconfig, caller_token = kubernetes_identities(tmp) if kube else (None, "")
            async with FakeOpenAI(default=Text("hello")) as llm, oidc_issuer() as issuer:
                oidc = {"mode": "oidc", "oidc": {"issuer": issuer.url, "audience": AUDIENCE}}
                variants: dict[str, tuple[dict[str, Any], dict[str, str], str | None]] = {
                    "none": (agent_config(llm, None), {}, None),
                    "oidc": (agent_config(llm, oidc), {}, issuer.token(exp=int(time.time()) + 3600)),
                }
                if agents_kubeconfig is not None:
                    variants["kubernetes"] = (
                        agent_config(llm, {"mode": "kubernetes", "kubernetes": {"cacheSeconds": 300}}),
                        {"KUBECONFIG": str(agents_kubeconfig)},
                        caller_token,
                    )
                async with contextlib.AsyncExitStack() as stack:
                    clients: dict[str, Client[Any]] = {}
                    for name, (config, env, token) in variants.items():
                        url = await stack.enter_async_context(agent_process(config, tmp, env))
                        headers = {"Authorization": f"Bearer {token}"} if token else None
                        transport = StreamableHttpTransport(url, headers=headers)
                        clients[name] = await stack.enter_async_context(
                            Client(transport, mode="legacy", timeout=30)
                        )
                    samples = await round_robin(clients, args.requests)
        finally:
            if kube:
                subprocess.run(
                    ["kubectl", "delete", "namespace", NAMESPACE, "--wait=false"], capture_output=True
                )
                subprocess.run(["kubectl", "delete", "clusterrolebinding", NAMESPACE], capture_output=True)
    base = statistics.median(samples["none"])
    print(
        f"send_message round trip, {args.requests} calls each, warm decision caches (agent pinned to CPU 0)"
    )
    for name, values in samples.items():
        added = "" if name == "none" else f"   added at P50 {ms(statistics.median(values) - base)}"
        print(f"  auth {name:<11} P50 {ms(statistics.median(values))}  P95 {ms(pct(values, 0.95))}{added}")
    if not kube:
        print('  auth kubernetes  skipped: no reachable cluster (eval "$(hack/local/cluster env)" first)')
    alone = await verifier_alone(args.verifications)
    print(
        f"verifier alone, warm cache: {statistics.median(alone) * 1e6:.1f} µs per verify_token "
        "(median of batches)"
    )
    print("target: <= 1 ms added at P50")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=400, help="send_message calls per agent (default 400)"
    )
    parser.add_argument("--verifications", type=int, default=20000, help="in-process verify_token calls")
    asyncio.run(main(parser.parse_args()))
