"""Declared query parameters: one definition parses a request and documents it in OpenAPI.

A bad value is a 400 whose `param` names the parameter, in the protocol's error body.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.http import QueryDict

from ..models import Response
from ..protocol.errors import InvalidRequest


class BadValue(ValueError):
    """Raised by a parser; the message completes "'<name>' ..."."""


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    schema: dict[str, Any]
    description: str
    parse: Callable[[Any], Any]  # list[str] of values; dict[str, list[str]] for deepObject
    default: Any = None
    # deepObject parameters (`metadata[key]=value`) collect every `name[...]` key.
    style: str | None = None
    extra_openapi: dict[str, Any] = field(default_factory=dict)

    def openapi(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "in": "query",
            "required": False,
            "description": self.description,
            "schema": self.schema,
        }
        if self.style:
            doc.update(style=self.style, explode=True)
        doc.update(self.extra_openapi)
        return doc


def parse_query(query: QueryDict, params: tuple[Param, ...]) -> dict[str, Any]:
    """Parse the declared parameters; unknown ones are ignored, as OpenAI's API does."""
    values: dict[str, Any] = {}
    for param in params:
        if param.style == "deepObject":
            raw = {
                key[len(param.name) + 1 : -1]: query.getlist(key)
                for key in query
                if key.startswith(f"{param.name}[") and key.endswith("]")
            }
            try:
                values[param.name] = param.parse(raw)  # type: ignore[arg-type]
            except BadValue as exc:
                raise InvalidRequest(f"'{param.name}' {exc}", param=param.name) from None
            continue
        raw_values = query.getlist(param.name)
        if not raw_values:
            values[param.name] = param.default
            continue
        try:
            values[param.name] = param.parse(raw_values)
        except BadValue as exc:
            raise InvalidRequest(f"'{param.name}' {exc}", param=param.name) from None
    return values


# --------------------------------------------------------------------------- parsers


def _single(values: list[str]) -> str:
    if len(values) > 1:
        raise BadValue("must be given once.")
    return values[0]


def _int_between(low: int, high: int) -> Callable[[list[str]], int]:
    def parse(values: list[str]) -> int:
        raw = _single(values)
        try:
            value = int(raw)
        except ValueError:
            raise BadValue(f"must be an integer between {low} and {high}.") from None
        if not low <= value <= high:
            raise BadValue(f"must be an integer between {low} and {high}.")
        return value

    return parse


def _choice(*choices: str) -> Callable[[list[str]], str]:
    def parse(values: list[str]) -> str:
        raw = _single(values)
        if raw not in choices:
            raise BadValue("must be one of " + ", ".join(f"'{c}'" for c in choices) + ".")
        return raw

    return parse


def _text(max_length: int) -> Callable[[list[str]], str]:
    def parse(values: list[str]) -> str:
        raw = _single(values)
        if not raw or len(raw) > max_length:
            raise BadValue(f"must be a non-empty string of at most {max_length} characters.")
        return raw

    return parse


def _unix_seconds(values: list[str]) -> datetime:
    raw = _single(values)
    try:
        value = int(raw)
        return datetime.fromtimestamp(value, UTC)
    except (ValueError, OverflowError, OSError):
        raise BadValue("must be a Unix timestamp in seconds.") from None


STATUSES = tuple(Response.Status.values)


def _statuses(values: list[str]) -> tuple[str, ...]:
    statuses = tuple(s.strip() for v in values for s in v.split(",") if s.strip())
    bad = [s for s in statuses if s not in STATUSES]
    if bad or not statuses:
        raise BadValue("must be one or more of " + ", ".join(STATUSES) + f"; got '{','.join(bad)}'.")
    return statuses


_METADATA_KEY = re.compile(r"^[^\[\]]{1,64}$")


def _metadata(raw: dict[str, list[str]]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for key, values in raw.items():
        if not _METADATA_KEY.match(key):
            raise BadValue(f"keys must be 1 to 64 characters; got '{key}'.")
        if len(values) > 1:
            raise BadValue(f"[{key}] must be given once.")
        if len(values[0]) > 512:
            raise BadValue(f"[{key}] must be at most 512 characters.")
        pairs.append((key, values[0]))
    if len(pairs) > 16:
        raise BadValue("accepts at most 16 keys.")
    return tuple(sorted(pairs))


def _group_by(values: list[str]) -> tuple[str, ...]:
    parts = tuple(dict.fromkeys(p.strip() for v in values for p in v.split(",") if p.strip()))
    allowed = ("model", "day", "tenant")
    bad = [p for p in parts if p not in allowed]
    if bad or not parts:
        raise BadValue("must be one or more of 'model', 'day', 'tenant', comma-separated.")
    return parts


# --------------------------------------------------------------------------- declarations

TIMESTAMP = {"type": "integer", "minimum": 0, "description": "Unix time in seconds."}

LIMIT = Param(
    "limit",
    {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
    "How many objects to return, 1 to 100.",
    _int_between(1, 100),
    default=20,
)


def _order(default: str, what: str) -> Param:
    return Param(
        "order",
        {"type": "string", "enum": ["asc", "desc"], "default": default},
        f"Sort order: `asc` {what}.",
        _choice("asc", "desc"),
        default=default,
    )


RESPONSE_LIST_PARAMS: tuple[Param, ...] = (
    Param(
        "after",
        {"type": "string"},
        "A response id from an earlier page (its `last_id`): return the responses after it in this order.",
        _text(200),
    ),
    LIMIT,
    _order("desc", "is oldest first, `desc` newest first"),
    Param("model", {"type": "string"}, "Only responses of this model.", _text(200)),
    Param(
        "status",
        {"type": "array", "items": {"type": "string", "enum": list(STATUSES)}},
        "Only responses in these statuses; repeat the parameter or separate with commas.",
        _statuses,
        style="form",
        extra_openapi={"explode": False},
    ),
    Param("created_after", TIMESTAMP, "Only responses created at or after this time.", _unix_seconds),
    Param("created_before", TIMESTAMP, "Only responses created before this time.", _unix_seconds),
    Param(
        "metadata",
        {"type": "object", "additionalProperties": {"type": "string", "maxLength": 512}, "maxProperties": 16},
        "Only responses whose metadata has every given key with the given value: "
        "`metadata[project]=alpha&metadata[env]=prod`.",
        _metadata,
        style="deepObject",
    ),
    Param("previous_response_id", {"type": "string"}, "Only responses chained directly to this one.", _text(200)),
    Param(
        "root",
        {"type": "string"},
        "Only the responses of the chain that starts at this response: "
        "the response itself and every response chained after it, at any depth.",
        _text(200),
    ),
    Param(
        "q",
        {"type": "string", "maxLength": 500},
        "Full-text search over the text of the "
        "responses' input and output items (PostgreSQL full-text search, 'simple' configuration: "
        "every word must appear; a substring match on the embedded SQLite database).",
        _text(500),
    ),
)

THREAD_PARAMS: tuple[Param, ...] = (
    Param("after", {"type": "string"}, "An entry id from an earlier page (its `last_id`).", _text(300)),
    LIMIT,
    _order("asc", "is the conversation order (oldest first), `desc` newest first"),
)

USAGE_PARAMS: tuple[Param, ...] = (
    Param(
        "group_by",
        {"type": "array", "items": {"type": "string", "enum": ["model", "day", "tenant"]}, "default": ["model", "day"]},
        "Dimensions to group by, comma-separated; `tenant` needs an admin key. Default: per model per day.",
        _group_by,
        default=("model", "day"),
        style="form",
        extra_openapi={"explode": False},
    ),
    Param("start", TIMESTAMP, "Only responses created at or after this time.", _unix_seconds),
    Param("end", TIMESTAMP, "Only responses created before this time.", _unix_seconds),
    Param("model", {"type": "string"}, "Only responses of this model.", _text(200)),
)
