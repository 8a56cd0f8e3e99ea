"""A call's own choices for its turn: model, system prompt, tools, and key where it is the caller's.

The model is `params.model`, the addition `params.systemAppend`, the replaced instruction
`params.systemOverride`, the narrowed tools `params.toolsAllowlist`; the key is the caller's bearer
token when the provider takes it as its key (`credentials: callerBearer`).

Pure but for the provider variants it asks for: `turn_choice` checks the call's choices
against the agent's config and says what the turn runs with, or why the call is refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from pallas_api.config import AgentConfig, ModelOption, SendParams
from pallas_runtime.agent.turn import TurnChoice
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.provider import LLMProvider


class ChoiceRefused(ValueError):
    """A call's choice the agent cannot serve; the message says which and what it offers."""


class BearerMissing(ChoiceRefused):
    """The provider takes the caller's bearer token as its key, and the call brought none."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value; None for anything else."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _chosen_provider(
    config: AgentConfig, provider: LLMProvider, option: ModelOption, secrets: Mapping[str, str]
) -> LLMProvider:
    """The provider serving `option`: the agent's own (on the same client), or another's, new."""
    if option.provider is None:
        return provider if option.model == config.model else provider.with_model(option)
    # Another provider of the deployment: a client of the call's own (closed after the turn),
    # keyed from the secrets the agent's generation read, so a rotated key is used at once.
    other = config.model_copy(
        update={"provider": option.provider, "model": option.model, "capabilities": option.capabilities}
    )
    return create_provider(other, secrets)


def turn_choice(
    config: AgentConfig,
    provider: LLMProvider,
    params: SendParams | None,
    authorization: str | None,
    secrets: Mapping[str, str] | None = None,
) -> TurnChoice | None:
    """What the call's turn runs with; None when it chose nothing and the agent's defaults do.

    Args:
        config: The agent's config (its models, its provider's credentials).
        provider: The agent's provider.
        params: The call's `params`.
        authorization: The call's inbound `Authorization` value.
        secrets: The secret values the agent read (the keys of other providers' models).

    Returns:
        The turn's provider (another of its models, another provider's model, or a client keyed
        with the caller's bearer token: the caller must `aclose` any provider that is not
        `provider` after the turn), model and system addition.

    Raises:
        ChoiceRefused: `params.model` is not among the agent's models (the message lists them).
        BearerMissing: the provider takes the caller's bearer and none came in.
    """
    model = params.model if params is not None else None
    system_append = (params.system_append if params is not None else None) or ""
    override = params.system_override if params is not None else None
    allowlist = params.tools_allowlist if params is not None else None
    caller_keyed = config.provider.credentials == "callerBearer"
    if model is None and not system_append and override is None and allowlist is None and not caller_keyed:
        return None
    option = config.model_option(model or config.model)
    if option is None:
        offered = ", ".join(config.offered_models)
        raise ChoiceRefused(f"params.model {model!r} is not a model this agent offers (offered: {offered})")
    serving = option.provider or config.provider
    token = bearer_token(authorization)
    if serving.credentials == "callerBearer" and token is None:
        raise BearerMissing(
            f"provider {serving.name!r} takes the caller's bearer token as its API key "
            "(credentials: callerBearer) and this call came with none: send Authorization: Bearer <token>"
        )
    chosen = _chosen_provider(config, provider, option, secrets or {})
    if serving.credentials == "callerBearer" and token is not None:
        # A callerBearer provider holds no client of its own (adapter.SdkProvider), so nothing
        # is left open by replacing `chosen` with the caller-keyed twin.
        chosen = chosen.with_key(token)
    return TurnChoice(
        chosen,
        option.model,
        option.capabilities,
        system_append,
        system_override=override,
        tools_allowlist=None if allowlist is None else tuple(allowlist),
    )


def _providers(config: AgentConfig) -> list[str]:
    """The providers whose models the agent offers, its own first."""
    others = [option.provider.name for option in config.models if option.provider is not None]
    return list(dict.fromkeys([config.provider.name, *others]))


def conversation_model(config: AgentConfig, provider: str | None, model: str | None) -> str | None:
    """The model a conversation created with `metadata.provider`/`metadata.model` runs on.

    Checked by `params.model`'s rules (`turn_choice`): only models the agent offers, named as
    `params.model` names them (the result is such a name). `provider` alone picks that
    provider's first offered model (the agent's own model for its own provider); with `model`,
    the model may be named by its bare id on that provider.

    Returns:
        The choice to keep with the conversation; None when nothing was chosen.

    Raises:
        ChoiceRefused: an undeclared provider or model (the message lists what is offered).
    """
    if provider is None and model is None:
        return None
    if provider is not None and provider not in _providers(config):
        offered = ", ".join(_providers(config))
        raise ChoiceRefused(
            f"metadata.provider {provider!r} is not a provider this agent offers (offered: {offered})"
        )
    if model is None:
        if provider == config.provider.name:
            return config.model
        return next(
            option.choice for option in config.models if option.provider and option.provider.name == provider
        )
    candidates = [model]
    if provider is not None and provider != config.provider.name:
        candidates.insert(0, f"{provider}.{model}")
    for name in candidates:
        option = config.model_option(name)
        serving = option.provider.name if option is not None and option.provider else config.provider.name
        if option is not None and (provider is None or serving == provider):
            return option.choice
    offered = ", ".join(config.offered_models)
    where = f" of provider {provider!r}" if provider is not None else ""
    raise ChoiceRefused(
        f"metadata.model {model!r} is not a model{where} this agent offers (offered: {offered})"
    )
