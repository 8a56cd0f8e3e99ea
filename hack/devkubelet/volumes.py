"""Pod volumes as directories under the pod's state folder.

Each volume becomes `<pod dir>/volumes/<name>/`, filled from the API server (configMap, secret,
downwardAPI, projected with serviceAccountToken) or left for the containers (emptyDir). The files
are rewritten whenever their content changes, so ConfigMap and Secret updates and token rotation
reach running containers the way they do under a real kubelet (each file is replaced by rename, so
a reader never sees half a file). The containers see the directories at their mountPaths through
bind mounts in their own mount namespaces (see nsexec.py).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from devkubelet.envvars import ConfigError, ObjectSource, PodContext, field_value, resource_value
from devkubelet.kube import ApiError, Kube, Obj, meta

DEFAULT_MODE = 0o644
EMPTY_DIR_MODE = 0o777  # the kubelet's emptyDir permissions: any container user may write
TOKEN_EXPIRATION = 3607  # the kubelet's default for the admission-injected kube-api-access volume
TOKEN_REFRESH_FRACTION = 0.8  # refresh at 80 % of the lifetime, as the kubelet's token manager does


class VolumeError(Exception):
    """A volume cannot be set up yet (the pod stays ContainerCreating)."""


@dataclass
class _Token:
    value: str
    fetched: float
    lifetime: float


@dataclass
class PodVolumes:
    """Materialises one pod's volumes and keeps them current."""

    kube: Kube
    objects: ObjectSource
    root: Path
    _tokens: dict[tuple[str, int], _Token] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        return self.root / name

    async def sync(self, ctx: PodContext) -> None:
        """Create or refresh every volume of the pod; VolumeError names the first that fails."""
        self.root.mkdir(parents=True, exist_ok=True)
        for volume in (ctx.pod.get("spec") or {}).get("volumes") or []:
            name = str(volume["name"])
            try:
                await self._sync_one(volume, ctx)
            except (ConfigError, ApiError) as e:
                raise VolumeError(f'volume "{name}": {e}') from e

    def source(self, volume: Obj) -> Path:
        """The host path a container mount of this volume binds."""
        if "hostPath" in volume:
            return Path(volume["hostPath"]["path"])
        return self.path(str(volume["name"]))

    async def _sync_one(self, volume: Obj, ctx: PodContext) -> None:
        target = self.path(str(volume["name"]))
        if "emptyDir" in volume:
            # sizeLimit and medium: Memory are not enforced: it is a plain directory shared by the
            # pod's containers (a tmpfs would be private to one container's mount namespace).
            if not target.is_dir():
                target.mkdir(parents=True)
                target.chmod(EMPTY_DIR_MODE)
            return
        if "hostPath" in volume:
            _host_path(volume["hostPath"])
            return
        files: dict[str, tuple[bytes, int]] = {}
        if "configMap" in volume:
            await self._config_map(volume["configMap"], ctx, files, _default_mode(volume["configMap"]))
        elif "secret" in volume:
            await self._secret(volume["secret"], ctx, files, _default_mode(volume["secret"]))
        elif "downwardAPI" in volume:
            self._downward(volume["downwardAPI"], ctx, files, _default_mode(volume["downwardAPI"]))
        elif "projected" in volume:
            projected = volume["projected"]
            mode = _default_mode(projected)
            for source in projected.get("sources") or []:
                await self._projection(source, ctx, files, mode)
        else:
            kinds = sorted(k for k in volume if k != "name")
            raise ConfigError(f"volume type {', '.join(kinds)} is not supported by the dev kubelet")
        _write_tree(target, files)

    async def _projection(
        self, source: Obj, ctx: PodContext, files: dict[str, tuple[bytes, int]], mode: int
    ) -> None:
        if "configMap" in source:
            await self._config_map(source["configMap"], ctx, files, mode)
        elif "secret" in source:
            await self._secret(source["secret"], ctx, files, mode)
        elif "downwardAPI" in source:
            self._downward(source["downwardAPI"], ctx, files, mode)
        elif "serviceAccountToken" in source:
            spec = source["serviceAccountToken"]
            token = await self._token(
                ctx, str(spec.get("audience", "")), int(spec.get("expirationSeconds", 3600))
            )
            files[_relpath(str(spec["path"]))] = (token.encode(), mode)
        else:
            raise ConfigError(f"projected source {sorted(source)} is not supported by the dev kubelet")

    async def _config_map(
        self, ref: Obj, ctx: PodContext, files: dict[str, tuple[bytes, int]], mode: int
    ) -> None:
        namespace = str(meta(ctx.pod)["namespace"])
        obj = await self.objects.config_map(namespace, str(ref["name"]))
        if obj is None:
            if ref.get("optional"):
                return
            raise ConfigError(f'configmap "{ref["name"]}" not found')
        data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        _project_keys(data, ref, files, mode, f"ConfigMap {ref['name']}")

    async def _secret(
        self, ref: Obj, ctx: PodContext, files: dict[str, tuple[bytes, int]], mode: int
    ) -> None:
        namespace = str(meta(ctx.pod)["namespace"])
        name = str(ref.get("secretName") or ref.get("name"))
        obj = await self.objects.secret(namespace, name)
        if obj is None:
            if ref.get("optional"):
                return
            raise ConfigError(f'secret "{name}" not found')
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        _project_keys(data, ref, files, mode, f"Secret {name}")

    def _downward(self, spec: Obj, ctx: PodContext, files: dict[str, tuple[bytes, int]], mode: int) -> None:
        for item in spec.get("items") or []:
            if "fieldRef" in item:
                value = field_value(ctx, str(item["fieldRef"]["fieldPath"]), for_volume=True)
            elif "resourceFieldRef" in item:
                container = _container(ctx.pod, str(item["resourceFieldRef"].get("containerName", "")))
                value = resource_value(ctx, container, item["resourceFieldRef"])
            else:
                raise ConfigError(f"downwardAPI item {item} is not supported")
            files[_relpath(str(item["path"]))] = (value.encode(), int(item.get("mode", mode)))

    async def _token(self, ctx: PodContext, audience: str, expiration: int) -> str:
        """A bound ServiceAccount token from the TokenRequest API, cached until 80 % of its life."""
        cached = self._tokens.get((audience, expiration))
        if cached and time.monotonic() - cached.fetched < cached.lifetime * TOKEN_REFRESH_FRACTION:
            return cached.value
        pod_meta = meta(ctx.pod)
        namespace = str(pod_meta["namespace"])
        account = str((ctx.pod.get("spec") or {}).get("serviceAccountName") or "default")
        body: Obj = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                # An empty list means the API server's own audiences, as for the kubelet.
                "audiences": [audience] if audience else [],
                "expirationSeconds": expiration,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_meta["name"],
                    "uid": pod_meta["uid"],
                },
            },
        }
        answer = await self.kube.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", body=body
        )
        status = answer.get("status") or {}
        token = str(status.get("token", ""))
        if not token:
            raise ConfigError(f"TokenRequest for serviceaccount {namespace}/{account} returned no token")
        # The API server may extend the lifetime; refreshing on the requested one is the safe side.
        self._tokens[(audience, expiration)] = _Token(token, time.monotonic(), float(expiration))
        return token

    def remove(self) -> None:
        """Delete the volume contents (Secrets and tokens must not outlive the pod on disk)."""
        shutil.rmtree(self.root, ignore_errors=True)


def _default_mode(spec: Obj) -> int:
    return int(spec.get("defaultMode", DEFAULT_MODE))


def _container(pod: Obj, name: str) -> Obj:
    containers: list[Obj] = (pod.get("spec") or {}).get("containers") or []
    for container in containers:
        if container.get("name") == name or not name:
            return container
    raise ConfigError(f"container {name!r} not found for resourceFieldRef")


def _project_keys(
    data: dict[str, bytes], ref: Obj, files: dict[str, tuple[bytes, int]], mode: int, what: str
) -> None:
    items = ref.get("items")
    if not items:
        for key, value in data.items():
            files[_relpath(key)] = (value, mode)
        return
    for item in items:
        key = str(item["key"])
        if key not in data:
            if ref.get("optional"):
                continue
            raise ConfigError(f"{what} has no key {key!r}")
        files[_relpath(str(item["path"]))] = (data[key], int(item.get("mode", mode)))


def _relpath(path: str) -> str:
    """A volume file path, refused if it could escape the volume directory."""
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts:
        raise ConfigError(f"invalid volume file path {path!r}")
    return str(PurePosixPath(*parts))


def _host_path(spec: Obj) -> None:
    path = Path(str(spec["path"]))
    kind = str(spec.get("type", ""))
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    elif kind in ("Directory", "File", "Socket", "CharDevice", "BlockDevice") and not path.exists():
        raise ConfigError(f"hostPath {path} does not exist")


def _write_tree(root: Path, files: dict[str, tuple[bytes, int]]) -> None:
    """Make root hold exactly these files; unchanged files are not touched."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, (content, mode) in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if target.read_bytes() == content and (target.stat().st_mode & 0o7777) == mode:
                continue
        tmp = target.with_name(f".{target.name}.tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as out:
            out.write(content)
            os.fchmod(out.fileno(), mode)  # the umask must not narrow the declared mode
        os.replace(tmp, target)
    wanted = {root / rel for rel in files}
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            if not any(w.is_relative_to(path) for w in wanted):
                with contextlib.suppress(OSError):
                    path.rmdir()
        elif path not in wanted:
            path.unlink(missing_ok=True)
