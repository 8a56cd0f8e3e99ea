"""hack/dev-kubelet, the development stand-in for the kubelet, on the real local control plane.

One dev kubelet runs for the whole module, as a subprocess with its own node name, pod range (a /24
of 127.1.0.0/16), state folder and hosts file (a temporary copy, so /etc/hosts is never touched).
Its node carries a taint only this module's pods tolerate, so pods of tests running beside it never
land there. One Deployment (Secret and ConfigMap env, downward API, `$(VAR)` expansion, a ConfigMap
volume at /etc/pallas-test, an emptyDir at /data, the ServiceAccount token, a readiness probe on a
named port that fails while /data/unready exists) behind a ClusterIP Service, a headless one and a
selector-less one is shared by the tests, which run in file order: the last one stops the dev
kubelet. Every connection the tests make goes to a loopback address.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod, Service, ServiceAccount

from tests.support.cluster import REPO, LocalCluster

DEV_KUBELET = REPO / "hack" / "dev-kubelet"
DEFAULT_POD_RANGE = ipaddress.IPv4Network("127.1.0.0/16")
MAPPING_DELAY = 3.0  # the hosts block follows a readiness or Service change within ~1 s; some slack
T = TypeVar("T")

SERVER = r"""
import http.server, json, os, socket, sys
from pathlib import Path

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
observed = {
    "argv": sys.argv[1:],
    "env": dict(os.environ),
    "hostname": socket.gethostname(),
    "conf": sorted(os.listdir("/etc/pallas-test")),
    "conf_greeting": Path("/etc/pallas-test/greeting").read_text(),
    "sa_files": sorted(os.listdir(SA)),
    "sa_namespace": Path(SA, "namespace").read_text(),
}
try:  # in-cluster credentials, exactly as the registry gets them
    from lightkube import Client, KubeConfig
    from lightkube.resources.authentication_v1 import SelfSubjectReview
    review = Client(config=KubeConfig.from_env()).create(SelfSubjectReview())
    observed["whoami"] = review.status.userInfo.username
except Exception as e:
    observed["whoami"] = repr(e)
Path("/data/observed.tmp").write_text(json.dumps(observed))
os.replace("/data/observed.tmp", "/data/observed.json")

class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/ready":  # the readiness probe: the test makes it fail with /data/unready
            code = 503 if os.path.exists("/data/unready") else 200
            body = b"unready" if code == 503 else b"ready"
        else:
            code = 200
            body = f"hello from {os.environ['POD_NAME']} via {self.headers['Host']}".encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer((sys.argv[1], 8080), Hello).serve_forever()
"""


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30, interval: float = 0.2) -> T:
    """Poll until probe returns something truthy; fail naming what was awaited."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def processes_with(marker: str) -> list[int]:
    return [
        int(p) for p in os.listdir("/proc") if p.isdigit() and marker in cmdline(int(p)) and alive(int(p))
    ]


@dataclass
class DevKubelet:
    process: subprocess.Popen[bytes]
    node: str
    cidr: str
    state_dir: Path
    hosts: Path
    hosts_original: str
    log: Path
    client: Client

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text().splitlines()[-30:])

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the dev kubelet did not stop on SIGTERM:\n{self.log_tail()}") from None


@pytest.fixture(scope="module")
def dev_kubelet(kube_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevKubelet]:
    folder = tmp_path_factory.mktemp("dev-kubelet")
    suffix = secrets.token_hex(3)
    hosts = folder / "hosts"
    original = "127.0.0.1 localhost\n# a line the dev kubelet must leave alone\n127.9.9.9 elsewhere.example\n"
    hosts.write_text(original)
    log = folder / "dev-kubelet.log"
    node = f"dk-test-{suffix}"
    # A /24 of the default range a demo may be using, far from where its round-robin starts.
    cidr = f"127.1.{secrets.randbelow(200) + 50}.0/24"
    client = Client(config=kube_cluster.config(), field_manager="pallas-tests")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                str(DEV_KUBELET),
                f"--kubeconfig={kube_cluster.kubeconfig}",
                f"--node-name={node}",
                f"--state-dir={folder / 'state'}",
                f"--hosts-file={hosts}",
                f"--pod-cidr={cidr}",
                f"--register-with-taints=pallas.dev/dev-kubelet-test={suffix}:NoSchedule",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    kubelet = DevKubelet(process, node, cidr, folder / "state", hosts, original, log, client)
    try:

        def node_ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the dev kubelet exited ({process.returncode}):\n{kubelet.log_tail()}")
            with contextlib.suppress(ApiError):
                conditions = client.get(Node, node).status.conditions or []
                return any(c.type == "Ready" and c.status == "True" for c in conditions)
            return False

        wait_for(f"node {node} Ready", node_ready)
        yield kubelet
    finally:
        kubelet.stop()
        with contextlib.suppress(ApiError):
            client.delete(Node, node)
        client.close()


@dataclass
class App:
    namespace: str
    marker: str

    def pod(self, client: Client) -> Pod | None:
        pods = [p for p in client.list(Pod, namespace=self.namespace) if p.metadata.deletionTimestamp is None]
        return pods[0] if len(pods) == 1 else None


def ready_pod(client: Client, app: App) -> Pod | None:
    pod = app.pod(client)
    if pod is None or pod.status is None or pod.status.phase != "Running":
        return None
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return pod if ready else None


def manifests(namespace: str, node: str, taint_value: str, marker: str) -> list[dict[str, Any]]:
    meta = {"namespace": namespace}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", **meta},
            "data": {"token": base64.b64encode(b"s3cr3t").decode()},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", **meta},
            "data": {"greeting": "hello", "mode": "dev"},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", **meta},
            # A ClusterIP Service: the address is allocated but never used (names map to pod IPs).
            "spec": {
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 8080, "targetPort": "http"}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web-headless", **meta},
            "spec": {
                "clusterIP": "None",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 8080, "targetPort": "http"}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "manual", **meta},
            # No selector: its backends cannot be derived, so it is never mapped.
            "spec": {"ports": [{"name": "http", "port": 8080}]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "tolerations": [{"key": "pallas.dev/dev-kubelet-test", "value": taint_value}],
                        "terminationGracePeriodSeconds": 5,
                        "containers": [
                            {
                                "name": "web",
                                "image": "python:3",
                                "command": ["python3", "-c", SERVER],
                                "args": [
                                    "$(POD_IP)",
                                    "$(GREETING)",
                                    "$$(GREETING)",
                                    "$(NOT_DEFINED)",
                                    marker,
                                ],
                                "ports": [{"name": "http", "containerPort": 8080}],
                                "env": [
                                    {
                                        "name": "POD_IP",
                                        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                    },
                                    {
                                        "name": "POD_NAME",
                                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                    },
                                    {
                                        "name": "POD_NAMESPACE",
                                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                    },
                                    {
                                        "name": "NODE",
                                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                    },
                                    {
                                        "name": "ACCOUNT",
                                        "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}},
                                    },
                                    {
                                        "name": "TOKEN",
                                        "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}},
                                    },
                                    {
                                        "name": "GREETING",
                                        "valueFrom": {
                                            "configMapKeyRef": {"name": "settings", "key": "greeting"}
                                        },
                                    },
                                    {
                                        "name": "ABSENT",
                                        "valueFrom": {
                                            "secretKeyRef": {
                                                "name": "no-such-secret",
                                                "key": "x",
                                                "optional": True,
                                            }
                                        },
                                    },
                                    {
                                        "name": "COMBINED",
                                        "value": "$(GREETING)@$(POD_IP) $$(GREETING) $(NOT_DEFINED)",
                                    },
                                ],
                                "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": "http"},
                                    "periodSeconds": 2,
                                    "failureThreshold": 2,
                                },
                                "volumeMounts": [
                                    {"name": "settings", "mountPath": "/etc/pallas-test"},
                                    {"name": "data", "mountPath": "/data"},
                                ],
                                "securityContext": {"readOnlyRootFilesystem": True},
                            }
                        ],
                        "volumes": [
                            {"name": "settings", "configMap": {"name": "settings"}},
                            {"name": "data", "emptyDir": {}},
                        ],
                    },
                },
            },
        },
    ]


@pytest.fixture(scope="module")
def app(dev_kubelet: DevKubelet) -> Iterator[App]:
    client = dev_kubelet.client
    namespace = f"t-devkubelet-{secrets.token_hex(3)}"
    client.create(Namespace(metadata=ObjectMeta(name=namespace, labels={"pallas.dev/test": "true"})))
    marker = f"dk-marker-{secrets.token_hex(4)}"
    application = App(namespace, marker)
    try:
        wait_for("the default ServiceAccount", lambda: _exists(client, namespace))
        taint_value = dev_kubelet.node.removeprefix("dk-test-")
        for manifest in manifests(namespace, dev_kubelet.node, taint_value, marker):
            client.create(from_dict(manifest))
        wait_for("the web pod Running and Ready", lambda: ready_pod(client, application), timeout=40)
        yield application
    finally:
        # The dev kubelet is stopped by now and the control plane has no pod GC: without a kubelet to
        # confirm, a graceful pod deletion would hold the namespace in Terminating forever.
        for pod in client.list(Pod, namespace=namespace):
            with contextlib.suppress(ApiError):
                client.delete(Pod, pod.metadata.name, namespace=namespace, grace_period=0)
        client.delete(Namespace, namespace)


def _exists(client: Client, namespace: str) -> bool:
    try:
        client.get(ServiceAccount, "default", namespace=namespace)
    except ApiError:
        return False
    return True


def volume_dir(kubelet: DevKubelet, pod: Pod, volume: str) -> Path:
    """Where the pod's volume lives on the host (in the pod's state folder)."""
    return kubelet.state_dir / "pods" / f"{pod.metadata.namespace}_{pod.metadata.name}" / "volumes" / volume


def observed(kubelet: DevKubelet, pod: Pod) -> dict[str, Any]:
    """What the container wrote about itself into its emptyDir (read from the pod's state folder)."""
    path = volume_dir(kubelet, pod, "data")
    data = wait_for("the container's observed.json", lambda: (path / "observed.json").is_file() and path)
    return dict(json.loads((data / "observed.json").read_text()))


def container_pid(pod: Pod) -> int:
    status = pod.status.containerStatuses[0]
    assert status.containerID is not None
    assert status.containerID.startswith("devkubelet://"), status
    return int(status.containerID.removeprefix("devkubelet://"))


def test_pod_runs_ready_with_its_own_loopback_ip(dev_kubelet: DevKubelet, app: App) -> None:
    client = dev_kubelet.client
    pod = ready_pod(client, app)
    assert pod is not None
    status = pod.status
    assert pod.spec.nodeName == dev_kubelet.node
    assert status.hostIP == "127.0.0.1"
    address = ipaddress.IPv4Address(status.podIP)
    assert address in ipaddress.IPv4Network(dev_kubelet.cidr)
    assert address in DEFAULT_POD_RANGE
    assert [ip.ip for ip in status.podIPs] == [status.podIP]
    assert status.startTime is not None
    conditions = {c.type: c.status for c in status.conditions}
    for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
        assert conditions[kind] == "True", conditions
    container = status.containerStatuses[0]
    assert (container.ready, container.started, container.restartCount) == (True, True, 0)
    assert container.state.running is not None
    assert "python3" in cmdline(container_pid(pod))


def names_of(service: str, namespace: str) -> tuple[str, str, str]:
    return (
        f"{service}.{namespace}.svc.cluster.local",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}",
    )


def mapped_to(kubelet: DevKubelet, service: str, namespace: str, ip: str | None) -> bool:
    """Whether all three names of the Service map to ip (None: none of them is mapped)."""
    found = hosts_entries(kubelet)
    return all(found.get(name) == ip for name in names_of(service, namespace))


def http_get(address: str, host: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection(address, 8080, timeout=5)
    try:
        connection.request("GET", "/", headers={"Host": f"{host}:8080"})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_service_names_resolve_through_the_hosts_block(dev_kubelet: DevKubelet, app: App) -> None:
    client = dev_kubelet.client
    pod = ready_pod(client, app)
    assert pod is not None
    ip = pod.status.podIP
    for service in ("web", "web-headless"):
        wait_for(
            f"Service {service} mapped to the pod",
            lambda s=service: mapped_to(dev_kubelet, s, app.namespace, ip),
        )
    # The ClusterIP Service got an address from the service range; the names map to the pod instead
    # (nothing answers on a ClusterIP here, and nothing ever connects to one).
    cluster_ip = client.get(Service, "web", namespace=app.namespace).spec.clusterIP
    assert cluster_ip not in (None, "", "None")
    assert not ipaddress.ip_address(cluster_ip).is_loopback
    assert cluster_ip not in hosts_entries(dev_kubelet).values()
    # Selector-less: no backends can be derived, so no names.
    assert mapped_to(dev_kubelet, "manual", app.namespace, None)
    text = dev_kubelet.hosts.read_text()
    assert text.startswith(dev_kubelet.hosts_original), "lines outside the block must stay as they were"
    assert f"# BEGIN pallas-dev-kubelet {dev_kubelet.node}" in text
    assert f"# END pallas-dev-kubelet {dev_kubelet.node}" in text
    assert all(ipaddress.ip_address(a).is_loopback for a in hosts_entries(dev_kubelet).values())
    # The process resolver reads /etc/hosts, not this file: resolve by hand, then talk HTTP by name.
    name = names_of("web", app.namespace)[0]
    address = hosts_entries(dev_kubelet)[name]
    assert address == ip
    assert http_get(address, name) == (200, f"hello from {pod.metadata.name} via {name}:8080")


def pod_ready_is(client: Client, app: App, wanted: str) -> Pod | None:
    pod = app.pod(client)
    if pod is None or pod.status is None:
        return None
    conditions = {c.type: c.status for c in pod.status.conditions or []}
    return pod if conditions.get("Ready") == wanted else None


def test_the_mapping_follows_pod_readiness(dev_kubelet: DevKubelet, app: App) -> None:
    client = dev_kubelet.client
    pod = ready_pod(client, app)
    assert pod is not None
    ip = pod.status.podIP
    wait_for("Service web mapped", lambda: mapped_to(dev_kubelet, "web", app.namespace, ip))
    unready = volume_dir(dev_kubelet, pod, "data") / "unready"
    unready.touch()  # the readiness endpoint answers 503 from now on
    try:
        wait_for("the pod not Ready", lambda: pod_ready_is(client, app, "False"), timeout=20)
        for service in ("web", "web-headless"):
            wait_for(
                f"Service {service} unmapped",
                lambda s=service: mapped_to(dev_kubelet, s, app.namespace, None),
                timeout=MAPPING_DELAY,
            )
    finally:
        unready.unlink(missing_ok=True)
    wait_for("the pod Ready again", lambda: pod_ready_is(client, app, "True"), timeout=20)
    wait_for(
        "Service web mapped again",
        lambda: mapped_to(dev_kubelet, "web", app.namespace, ip),
        timeout=MAPPING_DELAY,
    )


def test_the_mapping_follows_service_changes(dev_kubelet: DevKubelet, app: App) -> None:
    client = dev_kubelet.client
    pod = ready_pod(client, app)
    assert pod is not None
    ip = pod.status.podIP
    late = from_dict(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "late", "namespace": app.namespace},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080}]},
        }
    )
    client.create(late)
    wait_for(
        "a new Service mapped",
        lambda: mapped_to(dev_kubelet, "late", app.namespace, ip),
        timeout=MAPPING_DELAY,
    )
    client.patch(Service, "late", {"spec": {"selector": {"app": "nothing"}}}, namespace=app.namespace)
    wait_for(
        "a Service selecting no pod unmapped",
        lambda: mapped_to(dev_kubelet, "late", app.namespace, None),
        timeout=MAPPING_DELAY,
    )
    client.patch(Service, "late", {"spec": {"selector": {"app": "web"}}}, namespace=app.namespace)
    wait_for(
        "the Service mapped again",
        lambda: mapped_to(dev_kubelet, "late", app.namespace, ip),
        timeout=MAPPING_DELAY,
    )
    client.delete(Service, "late", namespace=app.namespace)
    wait_for(
        "a deleted Service unmapped",
        lambda: mapped_to(dev_kubelet, "late", app.namespace, None),
        timeout=MAPPING_DELAY,
    )
    assert mapped_to(dev_kubelet, "web", app.namespace, ip)


def hosts_entries(kubelet: DevKubelet) -> dict[str, str]:
    entries: dict[str, str] = {}
    inside = False
    for line in kubelet.hosts.read_text().splitlines():
        if line == f"# BEGIN pallas-dev-kubelet {kubelet.node}":
            inside = True
        elif line == f"# END pallas-dev-kubelet {kubelet.node}":
            inside = False
        elif inside and not line.startswith("#"):
            ip, *names = line.split()
            entries.update(dict.fromkeys(names, ip))
    return entries


def test_environment_is_resolved_like_the_kubelet_does(
    kube_cluster: LocalCluster, dev_kubelet: DevKubelet, app: App
) -> None:
    pod = ready_pod(dev_kubelet.client, app)
    assert pod is not None
    seen = observed(dev_kubelet, pod)
    env = seen["env"]
    ip = pod.status.podIP
    assert env["POD_IP"] == ip
    assert env["PALLAS_BIND_HOST"] == ip
    assert env["POD_NAME"] == pod.metadata.name
    assert seen["hostname"] == env["HOSTNAME"] == pod.metadata.name
    assert env["POD_NAMESPACE"] == app.namespace
    assert env["NODE"] == dev_kubelet.node
    assert env["ACCOUNT"] == "default"
    assert env["TOKEN"] == "s3cr3t"
    assert env["GREETING"] == "hello"
    assert (env["CFG_greeting"], env["CFG_mode"]) == ("hello", "dev")
    assert "ABSENT" not in env, "an optional reference to a missing Secret leaves the variable unset"
    assert env["COMBINED"] == f"hello@{ip} $(GREETING) $(NOT_DEFINED)"
    assert seen["argv"] == [ip, "hello", "$(GREETING)", "$(NOT_DEFINED)", app.marker]
    server = json.loads(kube_cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    host, port = "127.0.0.1", server.rsplit(":", 1)[1]
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == (host, port)
    assert env["PATH"].startswith(str(REPO / ".venv" / "bin") + ":")
    assert {"HOME", "LANG"} <= env.keys()


def test_volumes_are_mounted_for_the_process_only(dev_kubelet: DevKubelet, app: App) -> None:
    pod = ready_pod(dev_kubelet.client, app)
    assert pod is not None
    seen = observed(dev_kubelet, pod)
    assert seen["conf"] == ["greeting", "mode"]
    assert seen["conf_greeting"] == "hello"
    assert seen["sa_files"] == ["ca.crt", "namespace", "token"]
    assert seen["sa_namespace"] == app.namespace
    # The projected ServiceAccount token works with lightkube's in-cluster configuration.
    assert seen["whoami"] == f"system:serviceaccount:{app.namespace}:default"
    for path in ("/etc/pallas-test", "/data", "/var/run/secrets/kubernetes.io/serviceaccount"):
        assert not Path(path).exists(), f"{path} leaked onto the host"


def test_a_killed_process_is_restarted(dev_kubelet: DevKubelet, app: App) -> None:
    client = dev_kubelet.client
    pod = ready_pod(client, app)
    assert pod is not None
    old = container_pid(pod)
    os.kill(old, signal.SIGKILL)

    def restarted() -> Pod | None:
        current = ready_pod(client, app)
        if current is None or current.status.containerStatuses[0].restartCount != 1:
            return None
        return current

    again = wait_for("the container restarted and Ready", restarted)
    status = again.status.containerStatuses[0]
    assert again.metadata.uid == pod.metadata.uid
    assert status.lastState.terminated.exitCode == 137
    assert status.state.running is not None
    assert container_pid(again) != old
    assert not alive(old)
    assert again.status.podIP == pod.status.podIP


def test_a_deleted_pod_stops_its_process_and_goes(dev_kubelet: DevKubelet, app: App) -> None:
    client = dev_kubelet.client
    pod = ready_pod(client, app)
    assert pod is not None
    pid = container_pid(pod)
    client.delete(Pod, pod.metadata.name, namespace=app.namespace)

    def gone() -> bool:
        try:
            client.get(Pod, pod.metadata.name, namespace=app.namespace)
        except ApiError as e:
            return e.status.code == 404
        return False

    # A pod being deleted serves no Service: its names go at once, not when the object goes.
    wait_for(
        "the deleted pod's address unmapped",
        lambda: hosts_entries(dev_kubelet).get(names_of("web", app.namespace)[0]) != pod.status.podIP,
        timeout=MAPPING_DELAY,
    )
    wait_for("the pod object removed", gone, timeout=20)
    assert not alive(pid)
    # The ReplicaSet's replacement runs on a fresh address, which the Service names follow.
    replacement = wait_for("the replacement pod Ready", lambda: ready_pod(client, app), timeout=30)
    assert replacement.metadata.uid != pod.metadata.uid
    assert replacement.status.podIP != pod.status.podIP
    new_ip = replacement.status.podIP
    wait_for(
        "Service web mapped to the replacement",
        lambda: mapped_to(dev_kubelet, "web", app.namespace, new_ip),
        timeout=MAPPING_DELAY,
    )


def test_stopping_the_dev_kubelet_leaves_nothing_behind(dev_kubelet: DevKubelet, app: App) -> None:
    client = dev_kubelet.client
    pod = wait_for("a Ready pod", lambda: ready_pod(client, app))
    assert processes_with(app.marker), "the container should be running before the stop"
    wait_for("the Service names in the hosts block", lambda: hosts_entries(dev_kubelet))
    assert dev_kubelet.stop() == 0, dev_kubelet.log_tail()
    assert processes_with(app.marker) == []
    assert dev_kubelet.hosts.read_text() == dev_kubelet.hosts_original
    node = client.get(Node, dev_kubelet.node)
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "False"
    assert "node.kubernetes.io/not-ready" in {t.key for t in node.spec.taints or []}
    after = client.get(Pod, pod.metadata.name, namespace=app.namespace)
    assert {c.type: c.status for c in after.status.conditions}["Ready"] == "False"
    pod_dir = dev_kubelet.state_dir / "pods" / f"{app.namespace}_{pod.metadata.name}"
    assert not (pod_dir / "volumes").exists(), "volumes (Secrets, tokens) must not outlive the dev kubelet"
    assert (pod_dir / "web.log").is_file()


def test_bad_input_is_one_line(kube_cluster: LocalCluster, tmp_path: Path) -> None:
    unreachable = json.loads(kube_cluster.kubeconfig.read_text())
    unreachable["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    (tmp_path / "kubeconfig").write_text(json.dumps(unreachable))
    hosts = f"--hosts-file={tmp_path / 'hosts'}"
    cases = {
        "is not writable": [f"--kubeconfig={kube_cluster.kubeconfig}", "--hosts-file=/no/such/folder/hosts"],
        "outside 127.0.0.0/8": [
            f"--kubeconfig={kube_cluster.kubeconfig}",
            hosts,
            "--pod-cidr",
            "10.0.0.0/24",
        ],
        "is not an IPv4 range": [f"--kubeconfig={kube_cluster.kubeconfig}", hosts, "--pod-cidr=127.1.0.0/33"],
        "unreachable": [f"--kubeconfig={tmp_path / 'kubeconfig'}", hosts],
        "not found": [f"--kubeconfig={tmp_path / 'missing'}", hosts],
    }
    for expected, args in cases.items():
        res = subprocess.run(
            [str(DEV_KUBELET), *args, "--node-name=dk-never", f"--state-dir={tmp_path / 'state'}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert res.returncode == 1, res.stderr
        assert len(lines) == 1, res.stderr
        assert lines[0].startswith("dev-kubelet: "), res.stderr
        assert expected in lines[0], res.stderr


def test_pod_ips_default_to_a_loopback_range() -> None:
    res = subprocess.run([str(DEV_KUBELET), "--help"], capture_output=True, text=True, timeout=60, check=True)
    assert "127.1.0.0/16" in " ".join(res.stdout.split())
