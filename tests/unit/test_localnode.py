"""hack/local/localnode without a node: the settings it accepts, and the safety properties its network,
CNI, containerd, kubelet, CoreDNS and image-context choices promise (docs/local-kubernetes.md)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from localnode import NodeError, configs, dns, images, monitoring, netpol, network, settings, workers
from localnode.configs import NodePaths
from localnode.settings import NodeSettings
from tests.support.node_settings import DEFAULTS


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in (
        "PALLAS_NODE",
        "PALLAS_NODE_NAME",
        "PALLAS_NODE_BRIDGE",
        "PALLAS_POD_CIDR",
        "PALLAS_SERVICE_CIDR",
        "PALLAS_NODES",
    ):
        monkeypatch.delenv(var, raising=False)
    for var, _ in settings.PORT_VARS.values():
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_defaults_and_derived_addresses(clean_env: pytest.MonkeyPatch) -> None:
    s = settings.from_env()
    assert s == DEFAULTS
    assert (s.node_ip, s.prefix, s.api_service_ip, s.dns_ip) == ("10.244.0.1", 24, "10.96.0.1", "10.96.0.10")
    assert s.guard_table == "pallas_guard_pallas0"
    assert NodeSettings.from_json(json.loads(json.dumps(s.to_json()))) == s


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("PALLAS_POD_CIDR", "8.8.8.0/24", "must be an IPv4 range inside 10.0.0.0/8"),
        ("PALLAS_POD_CIDR", "192.0.2.0/24", "must be an IPv4 range inside 10.0.0.0/8"),
        ("PALLAS_POD_CIDR", "10.244.0.1/24", "is not an IPv4 network in CIDR form"),
        ("PALLAS_POD_CIDR", "10.244.0.0/30", "is too small"),
        ("PALLAS_SERVICE_CIDR", "fd00::/64", "must be an IPv4 range"),
        ("PALLAS_SERVICE_CIDR", "10.244.0.0/16", "overlap"),
        ("PALLAS_SERVICE_CIDR", "10.244.8.0/24", "the cluster's pod range 10.244.0.0/20 .* overlaps"),
        ("PALLAS_NODE_BRIDGE", "a-very-long-bridge-name", "is not an interface name"),
        ("PALLAS_NODE_NAME", "Node_1", "is not a DNS label"),
        ("PALLAS_KUBE_PROXY_METRICS_PORT", "10250", "the node's ports must differ"),
    ],
)
def test_bad_settings_are_refused(clean_env: pytest.MonkeyPatch, var: str, value: str, says: str) -> None:
    clean_env.setenv(var, value)
    with pytest.raises(NodeError, match=says):
        settings.from_env()


def test_the_guard_keeps_the_ranges_on_lo_and_the_bridge() -> None:
    rules = network.guard_rules(DEFAULTS, workers.all_host_links(DEFAULTS))
    # Replaces an older copy atomically, and runs before kube-proxy's chains (priority 0/-100).
    assert rules.index("delete table inet pallas_guard_pallas0") < rules.index(
        "table inet pallas_guard_pallas0 {"
    )
    assert rules.count("priority -300") == 3
    # The cluster's segments: the bridge and the links to every node it may add (2…16).
    inside = '"pallas0", ' + ", ".join(f'"pallas0-n{i}"' for i in range(2, 17))
    forward = rules.split("chain forward")[1].split("chain postrouting")[0]
    assert f"iifname {{ {inside} }} oifname {{ {inside} }} accept" in forward
    assert f"iifname {{ {inside} }} drop" in forward
    assert f"oifname {{ {inside} }} drop" in forward
    postrouting = rules.split("chain postrouting")[1].split("chain input")[0]
    assert f'oifname {{ "lo", {inside} }} accept' in postrouting
    # The pod range is every node's: 16 subnets of the first node's size.
    assert "ip daddr { 10.244.0.0/20, 10.96.0.0/16 } drop" in postrouting
    assert "ct original ip daddr 10.96.0.0/16 drop" in postrouting
    assert "ct original ip saddr 10.244.0.0/20 drop" in postrouting
    assert f'iifname {{ "lo", {inside} }} accept' in rules.split("chain input")[1]


def test_a_second_node_takes_the_next_subnet_a_namespace_and_a_link_of_its_own() -> None:
    w = workers.worker(DEFAULTS, 2)
    assert (w.name, w.node.pod_cidr, w.node.node_ip, w.host_ip) == (
        "pallas-node-2", "10.244.1.0/24", "10.244.1.1", "10.244.0.1",
    )  # fmt: skip
    assert (w.netns, w.host_link, w.cgroup_root) == ("pallas0-n2", "pallas0-n2", "/pallas-node-2")
    assert w.node.cluster_cidr == DEFAULTS.cluster_cidr == "10.244.0.0/20"
    assert (w.node.service_cidr, w.node.dns_ip) == (DEFAULTS.service_cidr, DEFAULTS.dns_ip)
    assert workers.Worker.from_json(json.loads(json.dumps(w.to_json()))) == w
    # Sixteen nodes fill the cluster's range, each subnet once, the first node's never again.
    subnets = {workers.worker(DEFAULTS, i).node.pod_cidr for i in range(2, 17)}
    assert len(subnets) == 15
    assert DEFAULTS.pod_cidr not in subnets
    # A first node in the middle of its range: the others take the subnets around it.
    middle = NodeSettings(**{**DEFAULTS.to_json(), "pod_cidr": "10.244.5.0/24"})
    assert workers.worker(middle, 2).node.pod_cidr == "10.244.0.0/24"
    assert workers.worker(middle, 7).node.pod_cidr == "10.244.6.0/24"
    with pytest.raises(NodeError, match="a cluster here has 1 to 16 nodes"):
        workers.worker(DEFAULTS, 17)
    # Interface names stay within 15 characters with the longest bridge name.
    long_bridge = NodeSettings(**{**DEFAULTS.to_json(), "bridge": "a" * 15})
    assert max(len(name) for name in workers.all_host_links(long_bridge)) <= 15


@pytest.mark.parametrize(
    ("raw", "env", "expected"),
    [(None, None, 1), (None, "2", 2), ("3", "2", 3), ("16", None, 16)],
)
def test_the_node_count_comes_from_the_option_or_the_environment(
    clean_env: pytest.MonkeyPatch, raw: str | None, env: str | None, expected: int
) -> None:
    if env is not None:
        clean_env.setenv("PALLAS_NODES", env)
    assert settings.node_count(raw) == expected


@pytest.mark.parametrize(("raw", "says"), [("0", "--nodes='0'"), ("17", "from 1 to 16"), ("two", "'two'")])
def test_a_bad_node_count_is_refused_in_one_line(clean_env: pytest.MonkeyPatch, raw: str, says: str) -> None:
    with pytest.raises(NodeError, match=says):
        settings.node_count(raw)


def test_a_second_kubelet_keeps_its_pods_under_a_cgroup_root_of_its_own(tmp_path: Path) -> None:
    w = workers.worker(DEFAULTS, 2)
    conf = json.loads(
        configs.kubelet_config(w.node, NodePaths(tmp_path), tmp_path, w.serving_cert, w.cgroup_root)
    )
    assert conf["cgroupRoot"] == "/pallas-node-2"
    assert conf["address"] == "10.244.1.1"
    assert conf["tlsCertFile"] == str(tmp_path / "kubelet-pallas-node-2.crt")
    first = json.loads(configs.kubelet_config(DEFAULTS, NodePaths(tmp_path), tmp_path))
    assert "cgroupRoot" not in first
    assert first["tlsCertFile"] == str(tmp_path / "kubelet.crt")


def test_pods_get_no_default_route_no_gateway_and_no_masquerade(tmp_path: Path) -> None:
    conf = json.loads(configs.cni_config(DEFAULTS, NodePaths(tmp_path)))
    (bridge,) = conf["plugins"]
    # A CNI gateway would switch on machine-wide forwarding; masquerading would let pods out.
    assert (bridge["isGateway"], bridge["isDefaultGateway"], bridge["ipMasq"]) == (False, False, False)
    # The other nodes' pods (the cluster's range) and the Services, through the node; nothing else.
    assert bridge["ipam"]["routes"] == [
        {"dst": "10.244.0.0/20", "gw": "10.244.0.1"},
        {"dst": "10.96.0.0/16", "gw": "10.244.0.1"},
    ]
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))


def test_containerd_pulls_from_nowhere_and_keeps_its_state_in_the_node_folder(tmp_path: Path) -> None:
    paths = NodePaths(tmp_path)
    conf = configs.containerd_config(paths, "localhost/pallas-pause:x")
    assert f'root = "{tmp_path}/containerd/root"' in conf
    assert f'state = "{tmp_path}/containerd/state"' in conf
    assert "netns_mounts_under_state_dir = true" in conf
    assert "restrict_oom_score_adj = true" in conf
    assert f'config_path = "{paths.registry_hosts}"' in conf
    assert configs.registry_hosts().startswith('server = "http://127.0.0.1:1"')
    assert set(configs.containerd_env().values()) == {"http://127.0.0.1:1", ""}


def test_kubelet_and_kube_proxy_listen_inside_the_machine(tmp_path: Path) -> None:
    kubelet = json.loads(configs.kubelet_config(DEFAULTS, NodePaths(tmp_path), tmp_path / "pki"))
    assert (kubelet["address"], kubelet["healthzBindAddress"], kubelet["readOnlyPort"]) == (
        "10.244.0.1",
        "127.0.0.1",
        0,
    )
    assert kubelet["resolvConf"] == "", "pods get no host resolver"
    assert kubelet["clusterDNS"] == ["10.96.0.10"]
    proxy = json.loads(configs.proxy_config(DEFAULTS, NodePaths(tmp_path)))
    assert proxy["mode"] == "iptables"
    assert proxy["nodePortAddresses"] == ["10.244.0.1/32"]
    assert proxy["healthzBindAddress"].startswith("127.0.0.1:")
    assert proxy["metricsBindAddress"].startswith("127.0.0.1:")
    assert proxy["iptables"]["masqueradeAll"] is False


def test_coredns_answers_only_the_cluster_and_never_forwards() -> None:
    corefile = dns.corefile(DEFAULTS)
    assert corefile.startswith("cluster.local:1053 0.244.10.in-addr.arpa:1053 96.10.in-addr.arpa:1053 {")
    assert "forward" not in corefile
    assert "fallthrough" not in corefile
    service = dns.manifests(DEFAULTS, "img")[-1]
    assert service["spec"]["clusterIP"] == "10.96.0.10"
    assert {p["port"] for p in service["spec"]["ports"]} == {53, 9153}


def test_network_policies_run_on_the_host_network_with_metrics_on_loopback() -> None:
    account, role, binding, daemonset = netpol.manifests(DEFAULTS, "localhost/knp:1")
    assert (account["kind"], role["kind"], binding["kind"]) == (
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    )
    # Read-only rights: it watches pods, namespaces and policies, and writes only nftables.
    assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"list", "watch"}
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    (container,) = pod["containers"]
    assert (container["image"], container["imagePullPolicy"]) == ("localhost/knp:1", "Never")
    args = container["args"]
    assert "--metrics-bind-address=127.0.0.1:9080" in args, "never on every interface"
    # Each node's pod names its own node (a DaemonSet's pods run on every node).
    assert "--hostname-override=$(NODE_NAME)" in args
    assert container["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]
    assert "--fail-open" not in " ".join(args), "a policy holds even while the controller restarts"


def test_the_monitoring_stack_pulls_nothing_and_selects_by_its_label() -> None:
    refs = monitoring.Images("localhost/op:1", "localhost/reloader:1", "localhost/prom:1")
    objects = monitoring.manifests(refs, "v3.5.0")
    text = json.dumps(objects)
    images_named = re.findall(r'"image": "([^"]+)"', text)
    assert images_named, "the operator and Prometheus name their images"
    assert all(name.startswith("localhost/") for name in images_named), images_named
    operator = next(o for o in objects if o["kind"] == "Deployment")
    (container,) = operator["spec"]["template"]["spec"]["containers"]
    assert container["imagePullPolicy"] == "Never"
    assert "--prometheus-config-reloader=localhost/reloader:1" in container["args"]
    prometheus = next(o for o in objects if o["kind"] == "Prometheus")["spec"]
    assert prometheus["imagePullPolicy"] == "Never"
    assert (prometheus["image"], prometheus["version"]) == ("localhost/prom:1", "v3.5.0")
    for kind in ("serviceMonitor", "rule"):
        assert prometheus[f"{kind}Selector"] == {"matchLabels": monitoring.SELECTOR}
        assert prometheus[f"{kind}NamespaceSelector"] == {}, "every namespace"
    # A new configuration is re-read within seconds, not the reloader's default 3 minutes.
    (reloader,) = prometheus["containers"]
    assert reloader["name"] == "config-reloader"
    assert "--watch-interval=5s" in reloader["args"]
    assert (
        f"--watched-dir=/etc/prometheus/rules/prometheus-{monitoring.PROMETHEUS}-rulefiles-0"
        in reloader["args"]
    )


def test_older_project_archives_go_but_the_other_images_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PALLAS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(images, "buildah", lambda *args, **kwargs: "")
    folder = images.archives()
    names = [f"pallas-{i:016x}.tar" for i in range(5)]
    others = ["pallas-coredns-1.12.4-abc.tar", "pallas-prometheus-3.5.0-abc.tar", "pallas-pause-c-abc.tar"]
    for age, name in enumerate([*others, *names]):
        (folder / name).write_text(name)
        os.utime(folder / name, (age, age))
    images.forget_older(f"localhost/pallas:{4:016x}")
    assert sorted(p.name for p in folder.iterdir()) == sorted([*others, *names[-images.KEEP :]])


def test_the_host_resolver_block_goes_in_first_and_comes_out_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search example.internal\nnameserver 10.255.255.53\n")
    monkeypatch.setattr(dns, "RESOLV_CONF", resolv)
    dns.host_resolver_on(DEFAULTS, tmp_path)
    dns.host_resolver_on(DEFAULTS, tmp_path)  # idempotent
    lines = resolv.read_text().splitlines()
    assert lines[1] == "nameserver 10.96.0.10"
    assert sum(line.startswith(dns.BEGIN) for line in lines) == 1
    assert dns.host_resolver_is_on()
    dns.host_resolver_off()
    assert resolv.read_text() == "search example.internal\nnameserver 10.255.255.53\n"


def test_the_image_context_follows_the_dockerignore_allow_list(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("*\n!pyproject.toml\n!runtime/\n**/__pycache__\n**/*.pyc\n")
    for rel in (
        "pyproject.toml",
        "runtime/a.py",
        "runtime/__pycache__/a.pyc",
        "runtime/b.pyc",
        "tests/t.py",
        ".env",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    assert images.context_files(tmp_path) == [Path("pyproject.toml"), Path("runtime/a.py")]
    before = images.context_hash(tmp_path, "base:1")
    (tmp_path / "tests" / "t.py").write_text("changed")  # outside the context: same image
    assert images.context_hash(tmp_path, "base:1") == before
    (tmp_path / "runtime" / "a.py").write_text("changed")
    assert images.context_hash(tmp_path, "base:1") != before
    assert images.context_hash(tmp_path, "base:2") != images.context_hash(tmp_path, "base:1")
