"""What `pallas run` takes from its working directory and environment, as the original Pallas did.

- `.env` in the working directory is loaded into the environment without overriding variables
  already set (so a shell or systemd setting wins over the file).
- `PALLAS_AGENTS_CONFIG` names the manifests when no `-f` is given (default `agents.yaml`).
- `OPENAI_BASE_URL` is the base URL of openai providers whose manifest sets no `baseURL`
  (llama.cpp, vLLM and other OpenAI-compatible servers). Only here: an agent pod renders its
  provider's URL explicitly and never lets an ambient variable redirect it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from dotenv import dotenv_values
from pydantic import ValidationError

from pallas_api.config import ProviderConfig
from pallas_api.fields import HTTP_URL
from pallas_api.validation import describe
from pallas_runtime.commands.run.manifests import LocalPlan, ManifestError

CONFIG_ENV = "PALLAS_AGENTS_CONFIG"
DEFAULT_CONFIG = "agents.yaml"
OPENAI_BASE_URL = "OPENAI_BASE_URL"


def load_dotenv_file(path: Path, environ: MutableMapping[str, str]) -> list[str]:
    """Add the variables of `path` (if it exists) that `environ` lacks; their names, sorted.

    A variable with no value (`NAME` alone on a line) is skipped rather than set empty.
    """
    if not path.is_file():
        return []
    added = []
    for name, value in dotenv_values(path).items():
        if value is not None and name not in environ:
            environ[name] = value
            added.append(name)
    return sorted(added)


def manifest_files(given: list[str] | None, environ: Mapping[str, str]) -> list[str]:
    """The manifests to run: `-f` files, else `$PALLAS_AGENTS_CONFIG`, else `agents.yaml`.

    Raises:
        ManifestError: nothing given and the default file does not exist (the text says how to
            name one).
    """
    if given:
        return given
    configured = environ.get(CONFIG_ENV)
    if configured:
        return [configured]
    if not Path(DEFAULT_CONFIG).is_file():
        raise ManifestError(
            f"no manifests: pass -f FILE or set ${CONFIG_ENV} ({DEFAULT_CONFIG} does not exist here)"
        )
    return [DEFAULT_CONFIG]


def with_openai_base_url(plan: LocalPlan, environ: Mapping[str, str]) -> LocalPlan:
    """`plan` with `$OPENAI_BASE_URL` as the base URL of openai providers that set none.

    Raises:
        ManifestError: the variable is set but is not an http(s) URL.
    """
    base_url = environ.get(OPENAI_BASE_URL)
    if not base_url:
        return plan
    agents = []
    for agent in plan.agents:
        provider = agent.rendered.config.provider
        if provider.type == "openai" and provider.base_url is None:
            try:
                provider = ProviderConfig.model_validate({**provider.model_dump(), "base_url": base_url})
            except ValidationError as exc:
                raise ManifestError(f"${OPENAI_BASE_URL}: {describe(exc, limit=1)}") from None
            config = agent.rendered.config.model_copy(update={"provider": provider})
            agent = dataclasses.replace(agent, rendered=dataclasses.replace(agent.rendered, config=config))
        agents.append(agent)
    # The registry checks providers no agent uses too: they get the same endpoint.
    usable = base_url if re.match(HTTP_URL, base_url) else None
    return dataclasses.replace(plan, agents=agents, openai_base_url=usable)


def working_directory_env(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Load `./.env` into `environ` (the process environment by default); the names added."""
    return load_dotenv_file(Path.cwd() / ".env", os.environ if environ is None else environ)
