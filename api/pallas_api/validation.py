"""Pydantic validation errors in words a user can act on.

Every place that turns a `ValidationError` into a message (config files, manifests, CR specs,
tool arguments, health answers) says it the same way: the field's dotted path and pydantic's own
sentence, without the documentation links and input dumps pydantic adds to `str(exc)`.
"""

from __future__ import annotations

from pydantic import ValidationError


def field_problems(exc: ValidationError, *, prefix: str = "", whole: str = "(top level)") -> list[str]:
    """Each problem as `prefix.path.to.field: what is wrong`.

    Args:
        exc: The validation error.
        prefix: Where the validated document sits (`spec`); a problem of the whole document
            is named by it, or by `whole` without one.
        whole: What to call the whole document when there is no prefix.
    """
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join([prefix, *map(str, err["loc"])] if prefix else map(str, err["loc"]))
        problems.append(f"{where or whole}: {err['msg']}")
    return problems


def describe(
    exc: ValidationError, *, prefix: str = "", whole: str = "(top level)", limit: int | None = None
) -> str:
    """The problems joined by "; ", at most `limit` of them and then "(and N more)"."""
    problems = field_problems(exc, prefix=prefix, whole=whole)
    shown = problems if limit is None else problems[:limit]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more else "")
