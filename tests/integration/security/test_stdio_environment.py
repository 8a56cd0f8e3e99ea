"""What a stdio server run as a child (`pallas run`, `pallas bridge --command`) sees of its parent.

A child gets only `PATH`, `HOME` and a few more of the parent's variables plus its own
`stdio.env`, but it runs as the same user, so it could read the parent's whole environment, the
provider keys and Secret values of the run, from `/proc/<parent>/environ`. The parent now makes
itself non-dumpable before it starts a child, which puts its `/proc` files out of a same-user
process's reach; the child's own environment is as before.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import pallas_api
import pallas_runtime

SECRET = "sk-parent-secret-4242"
CHILD = """
import os, sys
try:
    parent = open(f"/proc/{os.getppid()}/environ", "rb").read()
    said = "read the parent's secret" if b"sk-parent-secret-4242" in parent else "read nothing secret"
except OSError as exc:
    said = f"refused: {type(exc).__name__}"
own = "own secret" if "sk-parent-secret-4242" in str(os.environ) else "own clean"
print(said, "|", own, "|", os.environ.get("GIVEN", "-"))
"""
PARENT = f"""
import asyncio, sys
from pallas_runtime.stdio.links import ChildProcess, child_environment

async def main():
    link = ChildProcess("probe", sys.executable, ["-c", {CHILD!r}], child_environment({{"GIVEN": "yes"}}))
    async with link.open() as pipes:
        print((await pipes.output.read()).decode().strip())

asyncio.run(main())
"""


NOBODY = "65534"


def as_a_plain_user() -> list[str]:
    """How to start the parent as a user's `pallas run` is: not root.

    Root reads any process's /proc files, so under root the test runs the parent as `nobody`
    (`setpriv`) with the system's Python, on this checkout's packages and site-packages; the
    venv's interpreter may be out of that user's reach.
    """
    if os.getuid() != 0:
        return [sys.executable]
    system = Path("/usr/bin/python3")
    setpriv = shutil.which("setpriv")
    if setpriv is None or not system.exists():
        pytest.skip("running as root without setpriv and /usr/bin/python3 to drop to a plain user")
    version = subprocess.run(
        [system, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(f"/usr/bin/python3 is {version}, not this interpreter's version")
    path = os.pathsep.join(
        [str(Path(pallas_runtime.__file__).parents[1]), str(Path(pallas_api.__file__).parents[1]),
         sysconfig.get_paths()["purelib"]]
    )  # fmt: skip
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "env", f"PYTHONPATH={path}",
            str(system)]  # fmt: skip


async def test_a_child_cannot_read_the_parents_environment() -> None:
    parent = await asyncio.create_subprocess_exec(
        *as_a_plain_user(), "-c", PARENT,
        env={**os.environ, "OPENAI_API_KEY": SECRET},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd="/",
    )  # fmt: skip
    out, err = await asyncio.wait_for(parent.communicate(), 30)
    assert parent.returncode == 0, err.decode()
    assert out.decode().strip() == "refused: PermissionError | own clean | yes", out.decode()
