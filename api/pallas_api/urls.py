"""URLs that must not carry credentials: `https://user:password@host/…` is refused with a hint.

A URL's user-info part passed the URL patterns, then failed at run time with "unexpected
ValueError" (the HTTP clients refuse it), and on the way it would have sat in plain text in the
spec, the agent's ConfigMap, status and logs. Credentials belong in a Secret; each URL field
says where instead (`WithoutCredentials(instead=…)`).

One object gives both checks from the model: the pydantic validator (`pallas validate`,
`pallas run`, the operator, config files) and the CEL rule of the generated CRD schema, with
the same message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

WITH_CREDENTIALS = r"^([A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#]*@"
"""A URL (or a scheme-relative reference) whose authority has a user-info part (`user[:pw]@`)."""

SECRET_HEADER = (
    "put them in a header from a Secret instead: headers: [{name: Authorization, valueFrom: "
    "{secretKeyRef: {name: <secret>, key: <key>}}}]"
)
SECRET_API_KEY = "put the key in apiKey (a secretKeyRef; it is sent as a header) instead"
PEER_BEARER = "peers are called with the caller's bearer, so leave credentials out"
PUBLISHED = "it is published to every client, so leave credentials out"
COLLECTOR = (
    "traces carry no credentials to the collector: reach it on the cluster network, or through a "
    "collector sidecar or agent that holds them"
)
PUBLIC_KEYS = "an issuer's discovery document and signing keys are public, so leave credentials out"


@dataclass(frozen=True, slots=True)
class WithoutCredentials:
    """`Annotated` metadata refusing a URL with `user:password@`, saying what to do instead."""

    instead: str

    @property
    def message(self) -> str:
        """What both checks say."""
        return f"must not carry credentials (user:password@host): {self.instead}"

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """The field's own schema, then the check."""
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The field's JSON schema with the CEL rule the API server checks."""
        json_schema = handler(schema)
        rule = {"rule": f"!self.matches(r'{WITH_CREDENTIALS}')", "message": self.message}
        json_schema["x-kubernetes-validations"] = [*json_schema.get("x-kubernetes-validations", []), rule]
        return json_schema

    def _check(self, value: object) -> object:
        # The message never repeats the value: it holds the password.
        if isinstance(value, str) and re.match(WITH_CREDENTIALS, value):
            raise PydanticCustomError("url_with_credentials", self.message)
        return value
