"""The upstream dialects the gateway speaks, by name (a provider's `kind`): what every layer may
know of a dialect without its adapter. Pure: the admin's choices (models.Provider.kind), the
orchestration's and the API's rules read these facts; the adapter that speaks the wire (open a
call, what it applies, what reasoning it withholds) is paired with it in upstreams/dialects.py,
which is where a dialect is registered (one line: `upstreams.dialects.register(...)`).

A dialect's column in the surface table (protocol/surface.py) is keyed by its name: the three
built-in dialects have theirs written in the table's rows; a dialect added elsewhere declares its
column here (`column`, `chat_column`) and registering it adds that column to every row.

Seam for INBOUND dialects (a front door speaking another API, such as Anthropic's Messages):
these are the upstream (outbound) ones only. An inbound dialect would be a registry of its own
(its request parser into protocol.request.CreateRequest and its event writer from the engine's
events), keyed by path; nothing here assumes the client speaks Responses except `surface`'s
name for the native column.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from . import surface


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
    ),
    WireDialect(
        "anthropic",
        "Anthropic Messages (/v1/messages)",
        reported_fields=surface.REPORTED_FIELDS["anthropic"],
    ),
):
    register(_dialect)
