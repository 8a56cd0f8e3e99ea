"""How long the kubelet takes to bring a ConfigMap or Secret edit into a running pod's volume.

    flock /work/node.lock sh -c 'hack/local/cluster up && .venv/bin/python bench/kubelet_propagation.py \
        --rounds 6; hack/local/cluster down'

Needs the local cluster with its node (`hack/local/cluster up`); builds (if the tree changed) and loads
the project's image with `hack/build/image load`, as the e2e tests do. One pod mounts a ConfigMap and a
projected Secret volume, both whole (as agent pods do), and prints each file's content the moment
it changes (it reads both every 20 ms). Each round edits the ConfigMap and the Secret at once and
times until the pod has printed both new values; the pod and this script share the machine's
clock. Rounds alternate two ways:

- `plain`: nothing else; the kubelet writes the volumes at its next sync of the pod, every
  `syncFrequency` (default 1 min) plus jitter, with its ConfigMap/Secret cache kept current by a
  watch (`configMapAndSecretChangeDetectionStrategy: Watch`, the default);
- `nudge`: right after the edit, the pod's own metadata is patched (an annotation, as
  `pallas.dev/config-sync`): a pod update is a sync, so the volumes are written at once.

Rounds start at a random moment (0-`--spread` s after the previous one) so they sample the sync
period. Prints the kubelet's settings (from its configz) and min/median/max per way and volume.
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret

REPO = Path(__file__).resolve().parents[1]
WATCHER = """
import json, sys, time
seen = {}
while True:
    for name, path in (("configmap", "/cm/value"), ("secret", "/sec/value")):
        try:
            value = open(path).read()
        except OSError:
            continue
        if seen.get(name) != value:
            seen[name] = value
            print(json.dumps({"volume": name, "value": value, "at": time.time()}), flush=True)
    time.sleep(0.02)
"""


def cluster_env() -> dict[str, Any]:
    out = subprocess.run(
        [str(REPO / "hack" / "local" / "cluster"), "env", "--json"], capture_output=True, text=True
    )
    env: dict[str, Any] = json.loads(out.stdout or "{}")
    if not env.get("running") or not env.get("node"):
        sys.exit(
            "kubelet_propagation: needs the local node: hack/local/cluster up (under flock /work/node.lock)"
        )
    return env


def load_image() -> str:
    out = subprocess.run(
        [str(REPO / "hack" / "build" / "image"), "load"], capture_output=True, text=True, timeout=1800
    )
    if out.returncode != 0:
        sys.exit(f"hack/build/image load failed:\n{out.stderr[-2000:]}")
    return out.stdout.strip()


def pod_manifest(namespace: str, image: str) -> Pod:
    return Pod.from_dict(  # type: ignore[return-value]
        {
            "metadata": {"name": "watcher", "namespace": namespace},
            "spec": {
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532},
                "containers": [
                    {
                        "name": "watcher",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-u", "-c", WATCHER],
                        "volumeMounts": [
                            {"name": "cm", "mountPath": "/cm", "readOnly": True},
                            {"name": "sec", "mountPath": "/sec", "readOnly": True},
                        ],
                        "securityContext": {
                            "readOnlyRootFilesystem": True,
                            "allowPrivilegeEscalation": False,
                        },
                    }
                ],
                "volumes": [
                    {"name": "cm", "configMap": {"name": "watched"}},
                    {
                        "name": "sec",
                        "projected": {
                            "defaultMode": 0o440,
                            "sources": [
                                {"secret": {"name": "watched", "items": [{"key": "v", "path": "value"}]}}
                            ],
                        },
                    },
                ],
            },
        }
    )


def follow(client: Client, namespace: str, lines: queue.Queue[dict[str, Any]]) -> None:
    for line in client.log("watcher", namespace=namespace, follow=True):
        if line.strip().startswith("{"):
            lines.put(json.loads(line))


def wait_for(lines: queue.Queue[dict[str, Any]], value: str, timeout: float) -> dict[str, float]:
    """When each volume showed `value`."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < 2:
        event = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if event["value"] == value:
            seen[event["volume"]] = event["at"]
    return seen


def kubelet_settings(env: dict[str, Any]) -> dict[str, Any]:
    node = env["node"]["node_name"]
    kubectl = [str(Path(env["bin_dir"]) / "kubectl"), f"--kubeconfig={env['kubeconfig']}"]
    out = subprocess.run(
        [*kubectl, "get", "--raw", f"/api/v1/nodes/{node}/proxy/configz"], capture_output=True
    )
    config: dict[str, Any] = json.loads(out.stdout or "{}").get("kubeletconfig", {})
    return {
        "syncFrequency": config.get("syncFrequency"),
        "configMapAndSecretChangeDetectionStrategy": config.get("configMapAndSecretChangeDetectionStrategy"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each way (default 6)")
    parser.add_argument("--spread", type=float, default=20.0, help="random pause before each round, up to S")
    args = parser.parse_args()
    env = cluster_env()
    image = load_image()
    client = Client(KubeConfig.from_file(env["kubeconfig"]))
    namespace = f"propagation-{random.randrange(10**6)}"
    client.create(Namespace(metadata=ObjectMeta(name=namespace)))
    try:
        print(f"kubelet: {kubelet_settings(env)}", flush=True)
        client.create(
            ConfigMap(metadata=ObjectMeta(name="watched", namespace=namespace), data={"value": "0"})
        )
        client.create(Secret(metadata=ObjectMeta(name="watched", namespace=namespace), stringData={"v": "0"}))
        client.create(pod_manifest(namespace, image))
        for _ in range(300):
            pod = client.get(Pod, "watcher", namespace=namespace)
            if pod.status and pod.status.phase == "Running":
                break
            time.sleep(0.5)
        lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=follow, args=(client, namespace, lines), daemon=True).start()
        wait_for(lines, "0", 120)
        delays: dict[tuple[str, str], list[float]] = {}
        for round_ in range(1, 2 * args.rounds + 1):
            way = "nudge" if round_ % 2 == 0 else "plain"
            time.sleep(random.uniform(0, args.spread))
            value = str(round_)
            started = time.time()
            client.patch(ConfigMap, "watched", {"data": {"value": value}}, namespace=namespace)
            client.patch(Secret, "watched", {"stringData": {"v": value}}, namespace=namespace)
            if way == "nudge":
                patch = {"metadata": {"annotations": {"pallas.dev/config-sync": value}}}
                client.patch(Pod, "watcher", patch, namespace=namespace)
            seen = wait_for(lines, value, 300)
            for volume, at in seen.items():
                delays.setdefault((way, volume), []).append(at - started)
            print(
                f"round {round_} ({way}): "
                + ", ".join(f"{v} {seen[v] - started:.2f} s" for v in sorted(seen))
            )
        print("\nway    volume     n  min     median  max")
        for (way, volume), values in sorted(delays.items()):
            print(
                f"{way:6} {volume:9} {len(values):2} {min(values):6.2f}  {statistics.median(values):6.2f}"
                f"  {max(values):6.2f}"
            )
    finally:
        client.delete(Namespace, namespace)


if __name__ == "__main__":
    main()
