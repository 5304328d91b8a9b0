"""The upstream dialects the gateway speaks, by name (a provider's `kind`): what every layer may
know of a dialect without its adapter. Pure: the admin's choices (models.Provider.kind), the
orchestration's and the API's rules read these facts; the adapter that speaks the wire (open a
call, what it applies, what reasoning it withholds) is paired with it in upstreams/dialects.py,
which is where a dialect is registered (one line: `upstreams.dialects.register(...)`).

A dialect's column in the surface table (protocol/surface.py) is keyed by its name: the three
built-in dialects have theirs written in the table's rows; a dialect added elsewhere declares its
column here (`column`, `chat_column`) and registering it adds that column to every row.

INBOUND dialects (a front door speaking another API): `InboundDialect`, a registry of its own
keyed by path: its request check, its reading as a Responses create body (then parsed into
protocol.request.CreateRequest), its writer of the upstream's deltas and its error shape. The
first is Anthropic's Messages (`/v1/messages`, protocol/messages_api.py; served by
api/messages_views.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import messages_api, surface
from .errors import GatewayError


@dataclass(frozen=True, slots=True)
class WireDialect:
    name: str  # a provider's `kind`
    label: str  # the admin's choice label
    # The fields whose use on this dialect depends on the request or the provider's options: its
    # adapter's `applied_fields` reports which it applies (surface.ignored_fields).
    reported_fields: frozenset[str] = frozenset()
    # It runs OpenAI's hosted tools itself (web_search, ...): they are sent on where every target
    # of a route speaks it, instead of being dropped (orchestration/toolplan.py).
    runs_hosted_tools: bool = False
    # Passthrough (api/passthrough_views.py): the endpoints it takes as the client sent them
    # ("chat.completions", "embeddings"); the others are read as a Responses request for it.
    forwards: frozenset[str] = frozenset()
    # A Chat request read as a Responses one for it keeps the Responses API's floor of 16 output tokens.
    output_floor: bool = False
    # How it takes a stored PDF named by `file_id` (protocol/files.py): "document" (its bytes, as
    # a document block), "file_data" (its bytes, as the part's `file_data`) or "text" (its
    # extracted text: the upstream takes no document).
    file_parts: str = "text"
    # Its column in the surface table, for a dialect whose column is not written in the table's
    # rows: {field: spec} (surface._dialect's spec), the rest `default_handling`.
    column: Mapping[str, str] | None = None
    chat_column: Mapping[str, str] | None = None
    default_handling: str = "announced | not translated by this dialect"


_DIALECTS: dict[str, WireDialect] = {}


def register(dialect: WireDialect) -> None:
    """Add a dialect (its surface column with it); a name already taken is an error."""
    if dialect.name in _DIALECTS:
        raise ValueError(f"upstream dialect {dialect.name!r} is already registered")
    if dialect.name not in surface.UPSTREAM_KINDS:
        if dialect.column is None:
            raise ValueError(f"upstream dialect {dialect.name!r} declares no surface column")
        surface.add_column(
            dialect.name, dialect.column, dialect.chat_column or {}, dialect.default_handling, dialect.reported_fields
        )
    _DIALECTS[dialect.name] = dialect


def unregister(name: str) -> None:
    """Remove a dialect added by `register` (tests add one for a while)."""
    dialect = _DIALECTS.pop(name)
    if dialect.column is not None:
        surface.remove_column(name)


def get(name: str) -> WireDialect:
    """The dialect of a provider kind; KeyError for one no dialect speaks."""
    return _DIALECTS[name]


def names() -> Iterator[str]:
    return iter(_DIALECTS)


def choices() -> list[tuple[str, str]]:
    """(name, label) of each dialect, for models.Provider.kind (the built-in ones, at import)."""
    return [(d.name, d.label) for d in _DIALECTS.values()]


# The built-in dialects, in the admin's order. Their columns are the table's own.
for _dialect in (
    WireDialect(
        "chat_completions",
        "OpenAI-compatible Chat Completions",
        reported_fields=surface.REPORTED_FIELDS["chat_completions"],
        forwards=frozenset({"chat.completions", "embeddings"}),
    ),
    WireDialect(
        "responses",
        "Native Responses (/v1/responses: OpenAI, vLLM, SGLang)",
        reported_fields=surface.REPORTED_FIELDS["responses"],
        runs_hosted_tools=True,
        forwards=frozenset({"embeddings"}),
        output_floor=True,
        file_parts="file_data",
    ),
    WireDialect(
        "anthropic",
        "Anthropic Messages (/v1/messages)",
        reported_fields=surface.REPORTED_FIELDS["anthropic"],
        file_parts="document",
    ),
):
    register(_dialect)


@dataclass(frozen=True, slots=True)
class InboundDialect:
    """A front door speaking another API than Responses, served at `path` (under /v1)."""

    name: str
    path: str
    # The checks every request gets (the field named), whatever its route: the checked body.
    check: Callable[[Any], dict[str, Any]]
    # The checked body as a Responses create body (`output_floor`: the upstream is a Responses
    # server, whose least max_output_tokens is 16).
    to_responses_body: Callable[..., dict[str, Any]]
    # The fields of a body a translated route accepts without applying.
    ignored_fields: Callable[[Mapping[str, Any]], list[str]]
    # (model, id) -> the writer of the upstream's deltas in this dialect.
    writer: Callable[[str, str], Any]
    error_body: Callable[[GatewayError], dict[str, Any]]
    # The upstream dialect it is the native wire of: a route's target of that kind gets the
    # request in substance as sent, not translated (the view decides how).
    native_upstream: str | None = None


_INBOUND: dict[str, InboundDialect] = {}


def register_inbound(dialect: InboundDialect) -> None:
    if dialect.path in _INBOUND:
        raise ValueError(f"inbound dialect path {dialect.path!r} is already registered")
    _INBOUND[dialect.path] = dialect


def inbound(path: str) -> InboundDialect:
    """The inbound dialect served at `path`; KeyError for none."""
    return _INBOUND[path]


register_inbound(
    InboundDialect(
        "anthropic_messages",
        "messages",
        check=messages_api.check_request,
        to_responses_body=messages_api.to_responses_body,
        ignored_fields=messages_api.ignored_fields,
        writer=messages_api.MessagesWriter,
        error_body=messages_api.error_body,
        native_upstream="anthropic",
    )
)
