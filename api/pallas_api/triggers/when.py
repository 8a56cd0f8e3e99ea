"""An event trigger's `when`: a CEL expression over the watched object, compiled and evaluated.

CEL because the issue's examples are CEL and Kubernetes users already write it (validation
rules, admission policies); `cel-python` (module `celpy`, pure Python) evaluates it. The
expression can read only the variables it is given (`object`, `oldObject`, `type`) and call
CEL's standard functions: it cannot run code or reach the network.

celpy is imported on first use: importing it and building its grammar take 0.5 to 1 s, which every
`pallas` command that never meets a `when` should not pay.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import celpy

CONDITION_VARIABLES = frozenset({"object", "oldObject", "type"})
# CEL's macros bind their first argument (`c` in `list.exists(c, c.restartCount > 3)`).
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_MAX_ERROR = 300


class ConditionError(ValueError):
    """A `when` that does not compile, names an unknown variable, or fails on an object."""


@dataclass(frozen=True, slots=True, eq=False)
class Condition:
    """A compiled `when`."""

    source: str
    _program: celpy.Runner

    def holds(self, variables: Mapping[str, object]) -> bool:
        """Whether the expression is true for these variables (JSON-like values).

        Raises:
            ConditionError: evaluation failed (a field the object lacks, a type mismatch) or
                the result is not a bool; the message says which.
        """
        from celpy.adapter import json_to_cel  # lazily: see the module docstring
        from celpy.celtypes import BoolType
        from celpy.evaluation import CELEvalError

        activation = {name: json_to_cel(value) for name, value in variables.items()}  # type: ignore[arg-type]
        try:
            result = self._program.evaluate(activation)
        except CELEvalError as exc:
            raise ConditionError(f"when: {_eval_message(exc)}") from None
        if isinstance(result, CELEvalError):
            raise ConditionError(f"when: {_eval_message(result)}")
        if not isinstance(result, BoolType):
            kind = type(result).__name__.removesuffix("Type").lower()
            raise ConditionError(f"when: the expression gives {kind}, not bool")
        return bool(result)


def compile_condition(source: str, variables: Collection[str] = CONDITION_VARIABLES) -> Condition:
    """Compile a `when` and check that it reads only `variables`.

    Raises:
        ConditionError: a syntax error (with its line and column) or an unknown variable.
    """
    from celpy.celparser import CELParseError  # lazily: see the module docstring

    environment = _environment()
    try:
        tree = environment.compile(source)
    except CELParseError as exc:
        raise ConditionError(f"when: not CEL: {_parse_message(exc)}") from None
    unknown = sorted(_free_names(tree) - set(variables))
    if unknown:
        offered = ", ".join(sorted(variables))
        raise ConditionError(f"when: {unknown[0]!r} is not a variable here (a when reads {offered})")
    return Condition(source, environment.program(tree))


@functools.cache
def _environment() -> celpy.Environment:
    import celpy  # lazily: see the module docstring

    return celpy.Environment()


def _free_names(tree: object) -> set[str]:
    """The identifiers read, less those a macro binds."""
    from lark import Token, Tree  # celpy's parser, loaded with it

    assert isinstance(tree, Tree)
    names = {str(node.children[0]) for node in tree.find_data("ident") if node.children}
    bound: set[str] = set()
    for call in tree.find_data("member_dot_arg"):
        method = next((c for c in call.children if isinstance(c, Token)), None)
        arguments = next((c for c in call.children if isinstance(c, Tree) and c.data == "exprlist"), None)
        if method is None or str(method) not in _MACROS or arguments is None or not arguments.children:
            continue
        first = arguments.children[0]
        idents = list(first.find_data("ident")) if isinstance(first, Tree) else []
        if len(idents) == 1 and idents[0].children:
            bound.add(str(idents[0].children[0]))
    return names - bound


def _parse_message(exc: Exception) -> str:
    # celpy's message is the source line and a caret; say where instead.
    line = getattr(exc, "line", None)
    column = getattr(exc, "column", None)
    where = f"line {line}, column {column}" if line is not None else "at the end"
    detail = " ".join(str(exc).split())
    return f"{where}: {detail}"[:_MAX_ERROR]


def _eval_message(exc: Exception) -> str:
    # The first argument is the reason; celpy appends the whole activation (the object) to some,
    # which must not reach a status or a log.
    reason = str(exc.args[0]) if exc.args else type(exc).__name__
    return reason.split(" (in activation", 1)[0][:_MAX_ERROR]
