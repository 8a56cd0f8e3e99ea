"""Container start-up inside a private mount namespace, then exec of the container command.

The dev kubelet runs `python -I nsexec.py SPEC.json` for every container start. This process:

1. reads (and deletes) the spec the kubelet wrote: argv, env, working directory, mounts;
2. asks for SIGKILL if the kubelet dies (so a crashed kubelet leaves no container behind);
3. unshares its mount namespace and makes every mount private, so nothing below reaches the host,
   and its UTS namespace, so the container's hostname is the pod's name as in Kubernetes;
4. bind-mounts each volume directory at its mountPath (parents first). A mountPath whose parent
   directory does not exist on the host (`/etc/pallas`, `/var/run/secrets/...`) is created inside a
   tmpfs laid over its nearest existing ancestor; that tmpfs holds a symlink for every entry of the
   original directory (reached through a bind of it named `..devkubelet-host`), so the rest of the
   directory stays visible and a file the host later replaces by rename (/etc/hosts) is seen fresh.
   A new top-level directory (`/data`) needs a new root instead: a tmpfs with every entry of `/`
   bind-mounted into it, which the process then chroots into;
5. applies readOnly mounts and readOnlyRootFilesystem as read-only remounts in this namespace;
6. execs the command, so the container process keeps this pid and the kubelet's process group.

Only the standard library is used: this runs before the container's own program is imported.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG = 1
HOST_LINK = "..devkubelet-host"
START_FAILED = 128  # what the kubelet reports for a container that could not be started

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """The container cannot start; the message goes to its log."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source or fstype or ''} on {target}",
    )


def _remount_read_only(target: str) -> None:
    """Read-only bind remount keeping the flags the mount already has (the kernel insists)."""
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY
    vfs = os.statvfs(target).f_flag
    for st_flag, ms_flag in (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, MS_NOATIME),
        (os.ST_NODIRATIME, MS_NODIRATIME),
        (os.ST_RELATIME, MS_RELATIME),
    ):
        if vfs & st_flag:
            flags |= ms_flag
    _mount(None, target, None, flags)


class MountNamespace:
    """The mounts of one container, made inside the private namespace this process entered."""

    def __init__(self, staging: str, *, new_root: bool) -> None:
        # Mirrors are assembled on a tmpfs at the staging folder (inside the pod's state folder) and
        # then moved into place. It is reached through a file descriptor because a later mount (an
        # emptyDir at /tmp, say) may cover the path of the state folder itself.
        Path(staging).mkdir(parents=True, exist_ok=True)
        _mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=700")
        self._staging_fd = os.open(staging, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._staging = f"/proc/self/fd/{self._staging_fd}"
        self.new_root = new_root  # / is then a tmpfs of ours: top-level directories can be added
        self.mirrors: list[str] = []
        self._mirror_was_mount: list[bool] = []
        self.volume_targets: list[str] = []

    def bind(self, source_fd: int, target: str, is_dir: bool) -> str:
        """Bind the opened source at target (created if needed); the resolved target path."""
        real = os.path.realpath(target)
        self._ensure_mountpoint(real, is_dir, target)
        _mount(f"/proc/self/fd/{source_fd}", real, None, MS_BIND | MS_REC)
        self.volume_targets.append(real)
        return real

    def _ours(self, path: str) -> bool:
        """Whether new entries under path land in something of the pod's, not on the host."""
        if path == "/" and self.new_root:
            return True
        for mirror in self.mirrors:
            if _within(path, mirror) and not _within(path, f"{mirror}/{HOST_LINK}"):
                return True
        return any(_within(path, target) for target in self.volume_targets)

    def _ensure_mountpoint(self, real: str, is_dir: bool, asked: str) -> None:
        if os.path.lexists(real):
            if is_dir != os.path.isdir(real):
                kind = "directory" if is_dir else "file"
                raise SetupError(f"mountPath {asked}: the volume is a {kind} but {real} is not")
            return
        missing: list[str] = []
        ancestor = real
        while not os.path.exists(ancestor):
            ancestor, name = os.path.split(ancestor)
            missing.append(name)
        if not os.path.isdir(ancestor):
            raise SetupError(f"mountPath {asked}: {ancestor} is not a directory")
        if not self._ours(ancestor):
            self._mirror(ancestor, asked)
        path = ancestor
        for name in reversed(missing[1:]):
            path = os.path.join(path, name)
            os.mkdir(path, 0o755)
        if is_dir:
            os.mkdir(real, 0o755)
        else:
            Path(real).touch(0o644)

    def _mirror(self, directory: str, asked: str) -> None:
        """Lay a tmpfs over directory that shows the same entries and accepts new ones."""
        if directory == "/":  # new_root() should have made / a tmpfs of ours
            raise SetupError(f"mountPath {asked}: cannot add a directory to /")
        info = os.stat(directory)
        self._mirror_was_mount.append(os.path.ismount(directory))
        stage = f"{self._staging}/{len(self.mirrors)}"
        os.mkdir(stage)
        _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={stat.S_IMODE(info.st_mode):o}")
        os.chown(stage, info.st_uid, info.st_gid)
        host = f"{stage}/{HOST_LINK}"
        os.mkdir(host, 0o755)
        _mount(directory, host, None, MS_BIND | MS_REC)  # bound before it is covered below
        for entry in os.listdir(host):
            os.symlink(f"{HOST_LINK}/{entry}", f"{stage}/{entry}")
        _mount(stage, directory, None, MS_MOVE)
        self.mirrors.append(directory)

    def seal_root(self, root_binds: list[str]) -> None:
        """readOnlyRootFilesystem: what belongs to the root filesystem becomes read-only.

        That is the root mount (or, under a new root, the binds of its entries that were part of
        the host's root filesystem) and the mirrors of directories that were; separate filesystems
        such as /proc, /dev or a /tmp mount keep their own flags, as they do in a container.
        """
        _remount_read_only("/")
        for path in root_binds:
            _remount_read_only(path)
        for mirror, was_mount in zip(self.mirrors, self._mirror_was_mount, strict=True):
            if not was_mount:
                _remount_read_only(f"{mirror}/{HOST_LINK}")
            _remount_read_only(mirror)

    def close(self) -> None:
        """Detach the staging tmpfs (empty now that the mirrors moved away) so mountinfo stays tidy."""
        _libc.umount2(self._staging.encode(), MNT_DETACH)
        os.close(self._staging_fd)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _depth(path: str) -> int:
    return len([p for p in os.path.normpath(path).split("/") if p])


def new_root(staging: str) -> list[str]:
    """Chroot into a tmpfs that shows every entry of / and accepts new top-level directories.

    Returns the entries that were part of the host's root filesystem (not separate mounts), which
    readOnlyRootFilesystem has to make read-only one by one.
    """
    Path(staging).mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
    root_fd = os.open(staging, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    root = f"/proc/self/fd/{root_fd}"
    on_root_fs: list[str] = []
    for entry in sorted(os.listdir("/")):
        source, target = f"/{entry}", f"{root}/{entry}"
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
            continue
        if not os.path.ismount(source):
            on_root_fs.append(source)
        if os.path.isdir(source):
            os.mkdir(target)
            _mount(source, target, None, MS_BIND | MS_REC)
            if _within(staging, source):
                # The recursive copy includes this very tmpfs (under the state folder): drop it there.
                _libc.umount2(f"{target}{staging[len(source) :]}".encode(), MNT_DETACH)
        else:
            Path(target).touch()
            _mount(source, target, None, MS_BIND)
    os.chroot(root)
    os.chdir("/")
    os.close(root_fd)
    return on_root_fs


def _needs_new_root(targets: list[str]) -> bool:
    return any(not os.path.lexists("/" + os.path.realpath(t).strip("/").split("/")[0]) for t in targets)


def set_hostname(name: str) -> None:
    """The pod's name as hostname, in a UTS namespace of the container's own."""
    _check(_libc.unshare(CLONE_NEWUTS), "unshare(CLONE_NEWUTS)")
    raw = name.encode()
    _check(_libc.sethostname(raw, len(raw)), f"sethostname {name}")


def setup_mounts(spec: dict[str, Any]) -> None:
    """Enter a private mount namespace and make the container's mounts there."""
    mounts = _not_hiding_ourselves(spec.get("mounts", []), spec["venv_bin"])
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    rooted = _needs_new_root([m["target"] for m in mounts])
    root_binds = new_root(spec["staging"]) if rooted else []
    # Sources are opened before any volume is mounted: a mount could cover the state folder.
    opened = [(os.open(m["source"], os.O_PATH | os.O_CLOEXEC), m) for m in mounts]
    namespace = MountNamespace(spec["staging"], new_root=rooted)
    read_only: list[str] = []
    for fd, mount in sorted(opened, key=lambda pair: _depth(pair[1]["target"])):
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        real = namespace.bind(fd, mount["target"], is_dir)
        if mount.get("read_only"):
            read_only.append(real)
        os.close(fd)
    # Read-only last: a nested mountPath may still need a directory created inside a parent volume.
    for target in read_only:
        _remount_read_only(target)
    if spec.get("read_only_root"):
        namespace.seal_root(root_binds)
    namespace.close()


def _not_hiding_ourselves(mounts: list[dict[str, Any]], venv_bin: str) -> list[dict[str, Any]]:
    """The mounts that leave the interpreter, the virtualenv and the checkout visible.

    A container's emptyDir at /tmp would otherwise cover a checkout that lives under /tmp, and
    the container's own program could no longer start. Such a volume is not mounted (the process
    uses the host's directory there), and the container log says so.
    """
    needed = [os.path.realpath(venv_bin), os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)]
    kept = []
    for mount in mounts:
        target = os.path.realpath(mount["target"])
        hidden = next((path for path in needed if _within(path, target)), None)
        if hidden is None:
            kept.append(mount)
        else:
            print(
                f"dev-kubelet: volume at {mount['target']} not mounted: it would hide {hidden} "
                "(the development checkout); the container uses the host's directory there",
                file=sys.stderr,
                flush=True,
            )
    return kept


def resolve_command(argv0: str, venv_bin: str, env: dict[str, str]) -> str:
    """A bare command name is looked up in the project's virtualenv first, then in the PATH."""
    if "/" in argv0:
        return argv0
    candidate = os.path.join(venv_bin, argv0)
    if os.access(candidate, os.X_OK):
        return candidate
    for folder in env.get("PATH", "").split(":"):
        candidate = os.path.join(folder or ".", argv0)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SetupError(f'executable "{argv0}" not found in {venv_bin} or $PATH')


def main(argv: list[str]) -> int:
    spec_path = argv[1]
    with open(spec_path) as f:
        spec: dict[str, Any] = json.load(f)
    os.unlink(spec_path)  # it holds resolved Secret values
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != spec["parent_pid"]:  # the kubelet died before prctl took effect
        return START_FAILED
    # Python ignores these; an exec'd program must get the defaults back (a shell pipeline relies
    # on SIGPIPE to stop writers).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    env: dict[str, str] = spec["env"]
    try:
        set_hostname(spec["hostname"])
        setup_mounts(spec)
        command = resolve_command(spec["argv"][0], spec["venv_bin"], env)
        cwd = spec.get("cwd") or "/"
        if not os.path.isdir(cwd):
            os.makedirs(cwd, exist_ok=True)  # container runtimes create a missing workingDir too
        os.chdir(cwd)
        os.execve(command, spec["argv"], env)
    except (SetupError, OSError) as e:
        print(f"dev-kubelet: cannot start container: {e}", file=sys.stderr, flush=True)
    return START_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
