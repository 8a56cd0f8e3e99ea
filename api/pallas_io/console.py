"""Log lines for a person at a terminal: time, level and message in aligned columns, by rich.

What the record concerns (its agent, else its deployment) leads the message, so the lines of
the agents of one `pallas run` can be told apart; a process serving one agent (`pallas agent`)
does not repeat it on every line. Other `extra=` fields stay in the JSON lines.
rich colours only a terminal and honours `NO_COLOR`; markup in messages is not interpreted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TextIO

from rich.console import Console, ConsoleRenderable
from rich.logging import RichHandler
from rich.text import Text

TIME_FORMAT = "%H:%M:%S"


class ConsoleHandler(RichHandler):
    """rich's log handler with the record's agent or deployment before the message."""

    process_fields: Mapping[str, str] = {}
    """Fields every record of the process carries: not worth a prefix."""

    def render_message(self, record: logging.LogRecord, message: str) -> ConsoleRenderable:
        """The message, highlighted as rich does, after who it is about."""
        rendered = super().render_message(record, message)
        subject = next(
            (
                value
                for key in ("agent", "deployment")
                if (value := getattr(record, key, None)) and value != self.process_fields.get(key)
            ),
            None,
        )
        if not subject or not isinstance(rendered, Text):
            return rendered
        return Text.assemble((f"{subject} ", "bold cyan"), rendered)


def console_handler(stream: TextIO, process_fields: Mapping[str, str] | None = None) -> logging.Handler:
    """A handler writing console lines to `stream` (colour when it is a terminal)."""
    console = Console(file=stream, soft_wrap=False, highlight=False)
    handler = ConsoleHandler(
        console=console,
        show_path=False,
        markup=False,
        rich_tracebacks=False,  # the redactor has folded tracebacks into the (redacted) message
        log_time_format=TIME_FORMAT,
        omit_repeated_times=False,
    )
    handler.process_fields = dict(process_fields or {})
    return handler
