"""fast-agent-mcp 0.2.36 (the original Pallas's engine) as the agent benchmark's peer.

It is installed, when missing, into a venv of its own under the user's cache
(`~/.cache/pallas/bench/fast-agent-0.2.36/`), never into the project's `.venv`: its dependencies
(mcp 1.10.1, openai, anthropic, opentelemetry…) would clash with ours. fast-agent pins only
`mcp==1.10.1`, and what resolves today does not run (pydantic 2.12+ removed a helper mcp 1.10.1
imports), so the install is resolved by uv as of `RESOLVED_AS_OF`, a day when 0.2.36 was the
newest release: what its users installed then (pydantic 2.11.7, openai 1.93, anthropic 0.57,
starlette 0.46, uvicorn 0.35).

It is run as its users run it: an agent script (`@fast.agent(...)` + `async with fast.run()`)
started with `--server --transport http --host --port --quiet` serves that agent over Streamable
HTTP at `/mcp/` as the tool `<agent>_send(message)`. `--quiet` turns off the console chat and
tool display that a server has no one to show to.

One departure from its defaults: `use_history=False`. 0.2.36 serves one agent instance to every
MCP client, so with history on all clients share one conversation that grows without bound
(and concurrent turns overwrite each other's); each message then costs more than the one before
(the OpenAI SDK transforms the whole history on every call) and a figure would depend on how
long the run was. Without history each message costs the same, and the peer does less than
Pallas, which keeps a conversation per MCP session (up to 200 messages).

`fastagent.config.yaml` beside the script points the `generic` (OpenAI-compatible) provider at
the fake LLM (`generic.base_url`, model `generic.<model>`) and lists the downstream MCP servers
with `transport: http`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

VERSION = "0.2.36"
RESOLVED_AS_OF = "2025-07-08"
UV = "uv==0.13.9"  # the Makefile's
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pallas" / "bench"
VENV = CACHE / f"fast-agent-{VERSION}"

AGENT_SCRIPT = """\
import asyncio
from pathlib import Path

from mcp_agent.core.fastagent import FastAgent

fast = FastAgent("{name}", config_path=str(Path(__file__).with_name("fastagent.config.yaml")))


@fast.agent(
    name="{name}", instruction={instruction!r}, servers={servers!r}, model={model!r}, use_history=False
)
async def main() -> None:
    async with fast.run():  # with --server: serves the agents until stopped
        pass


asyncio.run(main())
"""


def python() -> Path:
    """The interpreter of fast-agent's venv, installing fast-agent-mcp there first when missing."""
    interpreter = VENV / "bin" / "python"
    stamp = VENV / f".installed-fast-agent-mcp-{VERSION}-{RESOLVED_AS_OF}"
    if stamp.exists():
        return interpreter
    print(f"installing fast-agent-mcp=={VERSION} into {VENV} (once)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    pip = [str(interpreter), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, UV], check=True)
    uv = [str(VENV / "bin" / "uv"), "pip", "install", "--quiet", "--python", str(interpreter)]
    subprocess.run([*uv, "--exclude-newer", RESOLVED_AS_OF, f"fast-agent-mcp=={VERSION}"], check=True)
    stamp.touch()
    return interpreter


def write_agent(
    folder: Path, *, name: str, instruction: str, model: str, base_url: str, servers: dict[str, str]
) -> Path:
    """Write `fastagent.config.yaml` and the agent script into `folder`; return the script."""
    config = {
        "default_model": f"generic.{model}",
        "generic": {"api_key": "bench", "base_url": base_url},
        "mcp": {"servers": {n: {"transport": "http", "url": u} for n, u in servers.items()}},
        # fast-agent's defaults otherwise, but no console display: a server shows no one.
        "logger": {"level": "warning", "progress_display": False, "show_chat": False, "show_tools": False},
    }
    (folder / "fastagent.config.yaml").write_text(yaml.safe_dump(config))
    script = folder / "agent.py"
    script.write_text(
        AGENT_SCRIPT.format(
            name=name, instruction=instruction, servers=list(servers), model=f"generic.{model}"
        )
    )
    return script


def command(script: Path, port: int) -> list[str]:
    """The command line serving the agent of `script` on 127.0.0.1:`port` (MCP at `/mcp`)."""
    return [
        str(python()),
        str(script),
        "--server",
        "--transport",
        "http",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--quiet",
    ]


def tool(name: str) -> str:
    """The MCP tool fast-agent 0.2.36 serves an agent as."""
    return f"{name}_send"


def url(port: int) -> str:
    """The MCP endpoint: mcp 1.10.1 mounts it at `/mcp/` and redirects `/mcp` there (a 307 that
    clients following redirects would pay on every request)."""
    return f"http://127.0.0.1:{port}/mcp/"
