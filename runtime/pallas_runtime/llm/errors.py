"""Turning SDK failures into short LLMErrors that never carry the API key.

Both official SDKs are generated from the same template, so their timeout, connection and
status exceptions have the same shape; each adapter passes its SDK's classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from pallas_io.llm_check import error_detail, redact
from pallas_runtime.llm.provider import LLMError

MAX_ERROR_TEXT = 400


class CredentialsUnavailable(Exception):
    """The pod's cloud identity gave no credentials (AWS chain, Google ADC); the text is safe."""


@dataclass(frozen=True, slots=True)
class SdkErrors:
    """One SDK's exception classes."""

    base: type[Exception]
    """Every error the SDK raises."""
    timeout: type[Exception]
    connection: type[Exception]
    status: type[Exception]


def safe(text: str, secret: str | None) -> str:
    """Redacted, then cut, so a key straddling the cut cannot leak in part."""
    return redact(text, secret)[:MAX_ERROR_TEXT]


def describe(
    exc: Exception,
    *,
    sdk: SdkErrors,
    label: str,
    base_url: str,
    secret: str | None,
    timeout: float,
    attempts: int = 1,
    elapsed: float | None = None,
) -> LLMError:
    """The LLMError for an SDK exception: what failed, where, and the provider's own words.

    A timeout after retries says so, with the time spent in all: "timed out after 5s" alone
    read as 5 s when the caller had waited 16.
    """
    if isinstance(exc, sdk.timeout):
        text = f"{label}: request to {base_url} timed out after {timeout:g}s"
        if attempts > 1:
            text += f" on each of {attempts} attempts"
        if elapsed is not None and attempts > 1:
            text += f" ({elapsed:.1f}s in all)"
        return LLMError(text)
    if isinstance(exc, sdk.connection):
        cause = exc.__cause__
        reason = f"{type(cause).__name__}: {cause}" if cause else str(getattr(exc, "message", exc))
        return LLMError(safe(f"{label}: cannot reach {base_url}: {reason}", secret))
    if isinstance(exc, sdk.status):
        status = getattr(exc, "status_code", None)
        detail = getattr(exc, "api_message", None) or error_detail(
            getattr(exc, "body", None), f"Error code: {status}"
        )
        return LLMError(safe(f"{label}: HTTP {status}: {detail}", secret), status=status)
    return LLMError(safe(f"{label}: {type(exc).__name__}: {exc}", secret))
