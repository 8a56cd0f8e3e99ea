"""The one wire convention of Pallas's pydantic models (resources, config, status, chart values)."""

from __future__ import annotations

from pydantic import ConfigDict
from pydantic.alias_generators import to_camel
from pydantic.config import ExtraValues


def camel_config(*, extra: ExtraValues, frozen: bool = True, validate_default: bool = False) -> ConfigDict:
    """CamelCase keys on the wire, snake_case attributes in Python, field docstrings as descriptions.

    Args:
        extra: What unknown keys do: `forbid` where a user writes them (a typo is an error),
            `ignore` where Pallas reads what another version may have written.
        frozen: Whether instances are immutable.
        validate_default: Whether defaults are validated too.
    """
    return ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra=extra,
        frozen=frozen,
        validate_default=validate_default,
        use_attribute_docstrings=True,
    )
