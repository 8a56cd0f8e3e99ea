"""Vertex AI's endpoints, shared by the providers it serves (Claude's Messages API, Gemini's)."""

from __future__ import annotations


def vertex_base_url(region: str) -> str:
    """Vertex AI's endpoint for `region`, as the SDK derives it."""
    if region == "global":
        return "https://aiplatform.googleapis.com/v1"
    if region in ("us", "eu"):
        return f"https://aiplatform.{region}.rep.googleapis.com/v1"
    return f"https://{region}-aiplatform.googleapis.com/v1"
