"""The query parameters of /v1, declared as DRF serializers.

One declaration parses a request's query string and documents it: drf-spectacular
reads the same fields into the OpenAPI document (`api/openapi_generation.py`). A bad value is
a 400 whose `param` names the parameter, in the protocol's error body; a parameter
the endpoint does not declare is ignored, as OpenAI's API does.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from typing import Any

from django.http import QueryDict
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers

from ..protocol.errors import InvalidRequest
from ..store.selectors import RESPONSE_STATUSES

STATUSES = RESPONSE_STATUSES
USAGE_GROUPS = ("model", "day", "tenant", "key", "prompt", "kind")
USAGE_FORMATS = ("json", "csv")


class QueryParameters(serializers.Serializer[None]):
    """A set of query parameters; `parse` turns a query string into their values.

    The query is handed to the serializer as a plain dict, not the `QueryDict`: DRF
    reads a QueryDict like an HTML form, where an empty value counts as absent, and
    here `model=` is a mistake to report, not a missing filter.
    """

    @classmethod
    def parse(cls, query: QueryDict) -> dict[str, Any]:
        if not query:  # the common case (a poll, a first page): the defaults, validated once
            return {name: dict(v) if isinstance(v, dict) else v for name, v in _defaults(cls).items()}
        data: dict[str, Any] = {}
        for name, field in _serializer(cls).fields.items():
            if isinstance(field, DeepObjectField):
                prefix = f"{name}["
                given = {key[len(prefix) : -1]: query.getlist(key) for key in query if _in_deep_object(key, prefix)}
                if given:
                    data[name] = given
            elif name in query:
                values = query.getlist(name)
                if isinstance(field, serializers.ListField):
                    data[name] = values
                elif len(values) > 1:
                    raise InvalidRequest(f"Invalid '{name}': it must be given once.", param=name)
                else:
                    data[name] = values[0]
        return cls._validated(data)

    @classmethod
    def openapi_parameters(cls) -> list[Any]:
        """What `extend_schema(parameters=...)` takes: the fields, and the deepObject style
        of a `name[key]=value` parameter, which drf-spectacular cannot tell from a field."""
        deep = [
            OpenApiParameter(
                name,
                type=field.openapi_schema,
                style="deepObject",
                explode=True,
                description=str(field.help_text),
            )
            for name, field in _serializer(cls).fields.items()
            if isinstance(field, DeepObjectField)
        ]
        return [cls, *deep]

    @classmethod
    def _validated(cls, data: dict[str, Any]) -> dict[str, Any]:
        # One serializer per class, validating every query: `run_validation` keeps no state
        # on the serializer (`is_valid` would), and a new serializer deep-copies its fields
        # first, which costs several times the validation itself.
        try:
            values = _serializer(cls).run_validation(data)
        except serializers.ValidationError as exc:
            errors = exc.detail if isinstance(exc.detail, dict) else {"query": exc.detail}
            name, details = next(iter(errors.items()))
            raise InvalidRequest(f"Invalid '{name}': {_sentence(_first(details))}", param=name) from None
        # Lists as tuples: the values are shared (the cached defaults) and hashed (filters).
        return {name: tuple(v) if isinstance(v, list) else v for name, v in values.items()}


@functools.cache
def _serializer(cls: type[QueryParameters]) -> QueryParameters:
    return cls()


@functools.cache
def _defaults(cls: type[QueryParameters]) -> dict[str, Any]:
    return cls._validated({})


def _in_deep_object(key: str, prefix: str) -> bool:
    return key.startswith(prefix) and key.endswith("]")


def _first(detail: Any) -> str:
    """The first message of a field's errors (a list field's are keyed by the value's index)."""
    while isinstance(detail, list | dict):
        detail = detail[0] if isinstance(detail, list) else next(iter(detail.values()))
    return str(detail)


def _sentence(text: str) -> str:
    """DRF's messages ("Ensure this value ...") inside ours ("Invalid 'limit': ensure ...")."""
    first_word = text.split(" ", 1)[0]
    return text if len(first_word) > 1 and first_word.isupper() else text[:1].lower() + text[1:]


# --------------------------------------------------------------------------- fields


_PLUS_LOST = re.compile(r"(?<=\d) (\d\d(?::?\d\d)?)$")


@extend_schema_field(
    {
        # The maximum is the last second of year 9999, the end of what a timestamp can say.
        "oneOf": [
            {"type": "integer", "minimum": 0, "maximum": 253402300799},
            {"type": "string", "format": "date-time"},
        ],
        "description": "Unix time in seconds, or an ISO 8601 date or date-time (UTC unless it gives an offset).",
        "examples": [1767225600, "2026-01-01", "2026-01-01T09:30:00+02:00"],
    }
)
class TimestampField(serializers.Field[datetime, Any, int, None]):
    """A point in time: Unix seconds (`1767225600`) or ISO 8601 (`2026-01-01`,
    `2026-01-01T09:30:00Z`, `2026-01-01T09:30:00+02:00`); without an offset it is UTC."""

    default_error_messages = {
        "invalid": "must be a Unix timestamp in seconds or an ISO 8601 date or date-time "
        "(e.g. 2026-01-01 or 2026-01-01T09:30:00Z)."
    }

    def to_internal_value(self, data: Any) -> datetime:
        text = str(data).strip()
        try:
            if text.isdigit():
                return datetime.fromtimestamp(int(text), UTC)
            # An unencoded `+02:00` in a query string arrives as ` 02:00`.
            moment = datetime.fromisoformat(_PLUS_LOST.sub(r"+\1", text))
        except (ValueError, TypeError, OverflowError, OSError):
            self.fail("invalid")
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            # A valid date-time whose offset carries it before year 1 or past 9999 in UTC: as a
            # bound of a range, the first or last moment there is.
            return (datetime.min if moment.year == 1 else datetime.max).replace(tzinfo=UTC)

    def to_representation(self, value: datetime) -> int:
        return int(value.timestamp())


class CommaSeparatedField(serializers.ListField):
    """Values of a repeated parameter, each of which may also be comma-separated:
    `status=failed&status=cancelled` or `status=failed,cancelled`. Duplicates are dropped."""

    def to_internal_value(self, data: Any) -> list[Any]:
        if isinstance(data, str):
            data = [data]
        parts = [part.strip() for value in data for part in str(value).split(",") if part.strip()]
        return list(dict.fromkeys(super().to_internal_value(parts)))


class DeepObjectField(serializers.DictField):
    """`metadata[project]=alpha&metadata[env]=prod`: each key given once; sorted by key."""

    KEY = re.compile(r"^[^\[\]\x00]{1,64}$")

    def __init__(self, *, max_keys: int, max_value_length: int, **kwargs: Any) -> None:
        self.max_keys = max_keys
        self.openapi_schema = {
            "type": "object",
            "additionalProperties": {"type": "string", "maxLength": max_value_length, "pattern": "^[^\\x00]*$"},
            "propertyNames": {"pattern": self.KEY.pattern},
            "maxProperties": max_keys,
        }
        super().__init__(child=serializers.CharField(max_length=max_value_length, allow_blank=True), **kwargs)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if len(data) > self.max_keys:
            raise serializers.ValidationError(f"accepts at most {self.max_keys} keys.")
        pairs = {}
        for key, values in data.items():
            if not self.KEY.match(key):
                raise serializers.ValidationError(f"keys must be 1 to 64 characters without brackets; got '{key}'.")
            if len(values) > 1:
                raise serializers.ValidationError(f"[{key}] must be given once.")
            try:
                pairs[key] = self.child.run_validation(values[0])
            except serializers.ValidationError as exc:
                detail = exc.detail[0] if isinstance(exc.detail, list) else exc.detail
                raise serializers.ValidationError(f"[{key}]: {_sentence(str(detail))}") from None
        return dict(sorted(pairs.items()))


def _limit() -> serializers.IntegerField:
    message = "must be an integer between 1 and 100."
    return serializers.IntegerField(
        min_value=1,
        max_value=100,
        default=20,
        help_text="How many objects to return, 1 to 100.",
        error_messages={"invalid": message, "min_value": message, "max_value": message, "max_string_length": message},
    )


def _order(default: str, what: str) -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=("asc", "desc"),
        default=default,
        help_text=f"Sort order: `asc` {what}.",
        error_messages={"invalid_choice": "must be 'asc' or 'desc'."},
    )


def _choice(choices: tuple[str, ...]) -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=choices, error_messages={"invalid_choice": "'{input}' is not one of " + ", ".join(choices) + "."}
    )


def _text(help_text: str, max_length: int = 200) -> serializers.CharField:
    # Taken as given: a value of spaces is a filter or cursor that matches nothing, not "absent".
    return serializers.CharField(
        min_length=1, max_length=max_length, trim_whitespace=False, default=None, help_text=help_text
    )


def _after(what: str) -> serializers.CharField:
    return _text(f"{what} from an earlier page (its `last_id`): return what follows it in this order.", 300)


# --------------------------------------------------------------------------- declarations


class PageQuery(QueryParameters):
    """Cursor paging of a list, newest first by default (input items, conversations, their items)."""

    after = _after("An id")
    limit = _limit()
    order = _order("desc", "is oldest first, `desc` newest first")


class ResponseListQuery(QueryParameters):
    after = _after("A response id")
    limit = _limit()
    order = _order("desc", "is oldest first, `desc` newest first")
    model = _text("Only responses of this model.")
    status = CommaSeparatedField(
        child=_choice(STATUSES),
        allow_empty=False,
        default=[],
        help_text="Only responses in these statuses; repeat the parameter or separate with commas.",
    )
    created_after = TimestampField(default=None, help_text="Only responses created at or after this time.")
    created_before = TimestampField(default=None, help_text="Only responses created before this time.")
    metadata = DeepObjectField(
        max_keys=16,
        max_value_length=512,
        default=dict,
        help_text="Only responses whose metadata has every given key with the given value: "
        "`metadata[project]=alpha&metadata[env]=prod`.",
    )
    previous_response_id = _text("Only responses chained directly to this one.")
    # A field named like `Field.root`: DRF's metaclass takes declared fields off the class.
    root = _text(  # type: ignore[assignment]  # a field named like Serializer.root, taken off the class by DRF's metaclass
        "Only the responses of the chain that starts at this response: "
        "the response itself and every response chained after it, at any depth."
    )
    q = _text(
        "Full-text search over the text of the responses' input and output items (PostgreSQL "
        "full-text search, 'simple' configuration: every word must appear; a substring match "
        "on the embedded SQLite database).",
        max_length=500,
    )


class ThreadQuery(QueryParameters):
    after = _after("An entry id")
    limit = _limit()
    order = _order("asc", "is the conversation order (oldest first), `desc` newest first")


class UsageQuery(QueryParameters):
    group_by = CommaSeparatedField(
        child=_choice(USAGE_GROUPS),
        allow_empty=False,
        default=["model", "day"],
        help_text="Dimensions to group by (model, day, tenant, key, prompt: a reusable prompt's id and version, kind: "
        "responses, chat.completions, embeddings, messages, guardrail.judge, ...): repeat the parameter or separate with "
        "commas; `tenant` needs an admin key. Default: per model per day.",
    )
    start = TimestampField(default=None, help_text="Only responses created at or after this time.")
    end = TimestampField(default=None, help_text="Only responses created before this time.")
    model = _text("Only responses of this model.")
    format = serializers.ChoiceField(
        choices=USAGE_FORMATS,
        default="json",
        error_messages={"invalid_choice": "'{input}' is not one of json, csv."},
        help_text="`csv`: the buckets as a CSV file (one row per bucket, a header row first).",
    )


class RetrieveQuery(QueryParameters):
    stream = serializers.BooleanField(
        default=False, help_text="Replay the event log of a background (worker-run) response as server-sent events."
    )
    starting_after = serializers.IntegerField(
        default=-1, help_text="With `stream`: skip the events up to this sequence number."
    )


class FileListQuery(QueryParameters):
    """`GET /v1/files`: OpenAI's paging (a limit of 1 to 10,000, all of them by default)."""

    after = _after("A file id")
    limit = serializers.IntegerField(
        min_value=1,
        max_value=10000,
        default=10000,
        help_text="How many files to return, 1 to 10,000.",
        error_messages={
            key: "must be an integer between 1 and 10000."
            for key in ("invalid", "min_value", "max_value", "max_string_length")
        },
    )
    order = _order("desc", "is oldest first, `desc` newest first")
    purpose = _text("Only files of this purpose.", max_length=64)
