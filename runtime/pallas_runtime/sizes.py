"""Sizes of text as users read them, and cutting text to a byte limit with a visible marker."""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB


def human_bytes(size: int) -> str:
    """`812 B`, `800 KiB`, `5.2 MiB`."""
    if size < KiB:
        return f"{size} B"
    if size < MiB:
        return f"{size / KiB:.0f} KiB"
    return f"{size / MiB:.1f} MiB".replace(".0 MiB", " MiB")


def utf8_size(text: str) -> int:
    """The size of `text` in UTF-8 bytes."""
    return len(text.encode("utf-8"))


def cut_to(text: str, limit: int, what: str) -> str:
    """`text` when it fits in `limit` UTF-8 bytes; else its start and a marker saying what was cut.

    The marker is part of the budget, and the cut never splits a character.
    """
    size = utf8_size(text)
    if size <= limit:
        return text
    marker = f"\n[… {what} cut: {human_bytes(size)} in all; the first {human_bytes(limit)} are shown]"
    room = max(limit - utf8_size(marker), 0)
    head = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    return head + marker
