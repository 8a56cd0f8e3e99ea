"""Message templates: `{{ .object.metadata.name }}`, a dotted path into the run's variables.

Deliberately tiny (no expressions, loops or calls): a trigger's message is written by whoever
may create a PallasTrigger and filled from webhook bodies and watched objects, so it must not
be able to run code or read what it was not given. A value that is a string is inserted as it
is; anything else as JSON. A path that is not there fails the render and names the path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

_ACTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_PATH = re.compile(r"\s*\.([A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)\s*")


class TemplateError(ValueError):
    """A template that cannot be read or rendered; the message names the action or the variable."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal text and paths, alternating (text first and last)."""

    texts: tuple[str, ...]
    paths: tuple[tuple[str, ...], ...]

    def variables(self) -> set[str]:
        """The top-level variables the template reads (`object` of `.object.metadata.name`)."""
        return {path[0] for path in self.paths}

    def check_variables(self, available: Collection[str]) -> None:
        """Raise TemplateError naming the first variable not among `available`."""
        for path in self.paths:
            if path[0] not in available:
                offered = ", ".join(f".{v}" for v in sorted(available))
                raise TemplateError(f"{_dotted(path)}: no such variable here (this source offers {offered})")

    def render(self, values: Mapping[str, object]) -> str:
        """The text with every action replaced by its value.

        Raises:
            TemplateError: a path that leads nowhere; the message names it.
        """
        out = [self.texts[0]]
        for path, text in zip(self.paths, self.texts[1:], strict=True):
            out += [_text(_lookup(values, path)), text]
        return "".join(out)


def parse_template(source: str) -> Template:
    """Read a template.

    Raises:
        TemplateError: an action that is not `{{ .path }}`, or an unclosed `{{`.
    """
    texts: list[str] = []
    paths: list[tuple[str, ...]] = []
    position = 0
    for action in _ACTION.finditer(source):
        match = _PATH.fullmatch(action.group(1))
        if match is None:
            raise TemplateError(
                f"{action.group(0)!r}: a template action is a dotted path such as "
                "{{ .object.metadata.name }}"
            )
        texts.append(source[position : action.start()])
        paths.append(tuple(match.group(1).split(".")))
        position = action.end()
    rest = source[position:]
    if "{{" in rest:
        raise TemplateError("'{{' is never closed with '}}'")
    texts.append(rest)
    return Template(tuple(texts), tuple(paths))


def _dotted(path: tuple[str, ...]) -> str:
    return "." + ".".join(path)


def _lookup(values: Mapping[str, object], path: tuple[str, ...]) -> object:
    value: object = values
    for depth, key in enumerate(path):
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            where = _dotted(path[: depth + 1])
            raise TemplateError(f"{_dotted(path)}: {where} is not there")
    return value


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
