"""What the gateway does with each part of OpenAI's Responses surface, in one place.

Every create-request field, tool type, input item type, output item type and WebSocket client
and server event of the `openai` SDK has one entry here, and the code that parses requests,
builds each upstream dialect's body and answers WebSocket messages reads its lists from these
tables (tests/protocol/test_surface.py checks both that the SDK has nothing unclassified and
that the builders do what the tables say; README.md's surface table is generated from them).

Treatments:
- served: the gateway does it (sends, translates or applies it itself);
- passed through: sent unchanged to `responses` (native Responses) upstreams; on a route with
  other upstream kinds it is accepted, not applied, and announced;
- announced: accepted but not applied; the response names it in a header
  (`x-gateway-ignored-fields` for request fields, `x-gateway-dropped-tools` for hosted tools);
- refused: a 400 naming it and saying why;
- not emitted (output side only): the gateway never sends it; the note says why.

Request fields are classified per upstream kind (`chat_completions`, `responses`,
`anthropic`): sent as is, translated (to what), applied by the gateway itself, announced, or
refused. A line per entry, so that one change is one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import quote

from .client_tool_types import CLIENT_TOOL_TYPES


class Treatment(StrEnum):
    SERVED = "served"
    PASSED_THROUGH = "passed through"
    ANNOUNCED = "announced"
    REFUSED = "refused"
    NOT_EMITTED = "not emitted"
    ACCEPTED = "accepted"  # request headers: taken, never refused, not read, sent to no upstream


class Handling(StrEnum):
    """What one upstream kind gets of a request field."""

    SENT = "sent"  # as is, under the same name
    TRANSLATED = "translated"  # into the upstream's own field(s), named in `to`
    GATEWAY = "gateway"  # applied by the gateway; the upstream is not told
    ANNOUNCED = "announced"  # accepted, not applied, named in x-gateway-ignored-fields
    REFUSED = "refused"  # a 400 naming the field


# The dialects with a column in the tables: the built-in three, whose columns are written in
# the rows below (in this order), and any added by `add_column`.
UPSTREAM_KINDS: tuple[str, ...] = ("chat_completions", "responses", "anthropic")
# The column of the dialect that is OpenAI's own Responses API: a field only it takes (every
# other dialect announces it) is "passed through".
NATIVE = "responses"


@dataclass(frozen=True, slots=True)
class Dialect:
    handling: Handling
    to: str = ""  # TRANSLATED: the upstream body's top-level key it becomes (tests check it)
    note: str = ""

    def describe(self) -> str:
        if self.handling is Handling.TRANSLATED:
            text = f"translated to `{self.to}`"
        else:
            text = {
                Handling.SENT: "sent as is",
                Handling.GATEWAY: "applied by the gateway",
                Handling.ANNOUNCED: "announced, not applied",
                Handling.REFUSED: "refused (400)",
            }[self.handling]
        return f"{text} ({self.note})" if self.note else text


def _dialect(spec: str) -> Dialect:
    """`"sent"`, `"gateway"`, `"announced"`, `"refused"`, or `"translated:KEY"`, each with an
    optional `" | note"`."""
    head, _, note = (part.strip() for part in spec.partition("|"))
    kind, _, to = head.partition(":")
    return Dialect(Handling(kind.strip()), to.strip(), note)


@dataclass(frozen=True, slots=True)
class RequestField:
    """A field's handling per upstream dialect, keyed by the dialect's name (a provider kind):
    the built-in dialects' columns are written in the rows below; another dialect's is added
    by `add_column` (protocol/dialects.py registers it)."""

    columns: dict[str, Dialect]
    why: str = ""  # why it is refused or not applied, for the 400's message and the README

    def on(self, kind: str) -> Dialect:
        return self.columns[kind]

    # The built-in columns by name (what chat_translation and the tests read).
    @property
    def chat_completions(self) -> Dialect:
        return self.columns["chat_completions"]

    @property
    def responses(self) -> Dialect:
        return self.columns["responses"]

    @property
    def anthropic(self) -> Dialect:
        return self.columns["anthropic"]

    @property
    def treatment(self) -> Treatment:
        handlings = {dialect.handling for dialect in self.columns.values()}
        if handlings == {Handling.REFUSED}:
            return Treatment.REFUSED
        if handlings <= {Handling.SENT, Handling.TRANSLATED, Handling.GATEWAY}:
            return Treatment.SERVED
        others = {dialect.handling for kind, dialect in self.columns.items() if kind != NATIVE}
        if self.columns[NATIVE].handling is Handling.SENT and others == {Handling.ANNOUNCED}:
            return Treatment.PASSED_THROUGH
        return Treatment.ANNOUNCED  # where a kind does not apply it


def _field(chat: str, responses: str, anthropic: str, why: str = "") -> RequestField:
    """A row of the built-in dialects' columns, in UPSTREAM_KINDS' order."""
    return RequestField(dict(zip(UPSTREAM_KINDS, (_dialect(chat), _dialect(responses), _dialect(anthropic)))), why)


def _all(spec: str, why: str = "") -> RequestField:
    return _field(spec, spec, spec, why)


@dataclass(frozen=True, slots=True)
class Entry:
    """A tool type, item type or event: its treatment and what it means here."""

    treatment: Treatment
    note: str = ""


def _e(treatment: Treatment, note: str = "") -> Entry:
    return Entry(treatment, note)


SERVED, PASSED, ANNOUNCED, REFUSED, NOT_EMITTED = (
    Treatment.SERVED,
    Treatment.PASSED_THROUGH,
    Treatment.ANNOUNCED,
    Treatment.REFUSED,
    Treatment.NOT_EMITTED,
)


def _client_run_tools(*, builtin: bool) -> dict[str, Entry]:
    """The `tools[].type`s of the client tool types (their table: protocol/client_tool_types.py):
    custom, or the built-ins."""
    entries = (entry for entry in CLIENT_TOOL_TYPES if entry.is_builtin is builtin)
    return {tool_type: _e(SERVED, _CLIENT_RUN) for entry in entries for tool_type in entry.tool_types}


def _client_tool_items(call: Entry | None, output: Entry | None) -> dict[str, Entry]:
    """The client tool types' call items, output items, or both, in the table's order."""
    items: dict[str, Entry] = {}
    for entry in CLIENT_TOOL_TYPES:
        if call is not None:
            items[entry.call_type] = call
        if output is not None:
            items[entry.output_type] = output
    return items


# -- POST /v1/responses (and the WebSocket `response.create`) ------------------------------
# Fields with a dot are parts of a field that are treated apart; the field's own entry then
# stands for the rest of it. A field name not here is accepted and announced (a newer SDK's).

_NOT_SENT = "announced | echoed in the Response, sent to no upstream"
_BY_PROVIDER_CACHE = "announced | sent where the provider's send_prompt_cache is on"
# fmt: off
REQUEST_FIELDS: dict[str, RequestField] = {
    "model": _all("translated:model | the route's upstream model"),
    "input": _field("translated:messages", "translated:input | item ids dropped, non-function calls as function calls", "translated:messages"),
    "instructions": _field("translated:messages | a first system or developer message", "sent", "translated:system"),
    "previous_response_id": _all("gateway | the chain's items are the context"),
    "conversation": _all("gateway | the conversation's items are the context"),
    "store": _all("gateway | stored by the gateway; a responses upstream is asked with store: false"),
    "background": _all("gateway | runs on a worker"),
    "stream": _all("gateway | the upstream call streams when the response does"),
    "generate": _all("gateway | false: no model call, Codex's warm-up"),
    "metadata": _all("gateway | stored and listed in the history"),
    "max_tool_calls": _all("gateway | bounds the tool calls the gateway runs"),
    "truncation": _all("gateway | auto: the gateway drops the oldest items"),
    "include": _all("gateway | reasoning.encrypted_content: reasoning sealed by the gateway; the others: what the gateway returns"),
    "include.message.output_text.logprobs": _field("translated:logprobs", "announced", "announced", "only Chat Completions upstreams are asked for logprobs"),
    "tools": _field("translated:tools", "translated:tools | hosted tools passed through", "translated:tools"),
    "tool_choice": _field("translated:tool_choice", "translated:tool_choice", "translated:tool_choice"),
    "parallel_tool_calls": _field("sent | with tools", "sent | with tools", "translated:tool_choice | disable_parallel_tool_use"),
    "max_output_tokens": _field("translated:max_tokens | or the provider's max_completion_tokens", "sent", "translated:max_tokens"),
    "temperature": _field("sent", "sent", "sent | left out when thinking is on"),
    "top_p": _field("sent", "sent", "sent | left out when thinking is on"),
    "presence_penalty": _field("sent", "announced", "announced", "not in this upstream's API"),
    "frequency_penalty": _field("sent", "announced", "announced", "not in this upstream's API"),
    "top_logprobs": _field("sent | with include message.output_text.logprobs", "sent", "announced", "Anthropic returns no logprobs"),
    "reasoning": _field("translated:reasoning_effort | the effort; summary not sent", "sent", "translated:thinking | the effort as a thinking budget"),
    "text": _field("translated:response_format", "translated:text | the format", "translated:system | json_object as an instruction; json_schema becomes output_config.format"),
    "text.format": _field("translated:response_format", "translated:text", "translated:system | json_object as an instruction; json_schema becomes output_config.format"),
    "text.verbosity": _all("announced", "no upstream is asked for a verbosity"),
    "user": _all(_NOT_SENT),
    "safety_identifier": _all(_NOT_SENT),
    "prompt_cache_key": _field(_BY_PROVIDER_CACHE, "sent", "translated:messages | cache_control marks (issue 36)"),
    "service_tier": _field("announced | sent where the provider's send_service_tier is on", "sent", "translated:service_tier | auto, priority and fast as auto, default as standard_only; flex and scale have no counterpart: not sent, announced"),
    "prompt_cache_retention": _field(_BY_PROVIDER_CACHE, "sent", "translated:messages | cache_control marks (issue 36)", "Chat Completions only by provider option"),
    "prompt_cache_options": _field(_BY_PROVIDER_CACHE, "sent", "translated:messages | cache_control marks: where (mode) and how long (ttl)", "Chat Completions only by provider option"),
    "prompt_cache_options.prewarm": _all("gateway | true: no model call, as generate: false"),
    "context_management": _all("gateway | automatic compaction (issue 36)"),
    "prompt": _all("gateway | the template of a reusable prompt in the gateway's registry, see Prompts"),
    "moderation": _all("announced", "the gateway runs no moderation model"),
    "stream_options": _all("announced", "the gateway asks its upstreams for usage itself; no obfuscation"),
    "background_options": _all("gateway | completion_window picks a background run's worker queue and time limit; continuation_id is stored; neither is echoed"),
    "access_programs": _all("announced", "no access programs on this gateway"),
    "image": _all("announced", "no image context compression"),
    "client_metadata": _all("announced", "Codex's own field: logged by OpenAI, not here"),
    "request_country": _all("announced", "Codex 0.171's own field (WebSocket `response.create`): the client's country, for OpenAI's routing; no use here"),
    "stream_id": _all("refused", "WebSocket-only: a lane of a WebSocket connection (served there), not part of POST /v1/responses"),
    "messages": _all("refused", "a Chat Completions field: the Responses API takes 'input'"),
    "max_tokens": _all("refused", "a Chat Completions field: the Responses API takes 'max_output_tokens'"),
    "max_completion_tokens": _all("refused", "a Chat Completions field: the Responses API takes 'max_output_tokens'"),
    "response_format": _all("refused", "a Chat Completions field: the Responses API takes 'text': {'format': ...}"),
    "functions": _all("refused", "a Chat Completions field: the Responses API takes 'tools' (each {'type': 'function', 'name', 'parameters'})"),
    "function_call": _all("refused", "a Chat Completions field: the Responses API takes 'tool_choice'"),
}

# -- POST /v1/chat/completions, per upstream kind --------------------------------------------
# A chat_completions target gets the body as sent; for the others it is read as a Responses
# request (protocol/chat_translation.py) and built by that kind's dialect.
_TO_RESPONSES = "translated:{} | through the Responses request"
CHAT_FIELDS: dict[str, RequestField] = {
    "model": _all("translated:model | the route's upstream model"),
    "messages": _field("sent", "translated:input", "translated:messages"),
    "stream": _field("sent", "gateway", "gateway"),
    "stream_options": _field("sent", "gateway | include_usage: a usage chunk", "gateway | include_usage: a usage chunk"),
    "tools": _field("sent", "translated:tools | function tools only", "translated:tools | function tools only"),
    "tool_choice": _field("sent", "translated:tool_choice", "translated:tool_choice"),
    "parallel_tool_calls": _field("sent", "sent | with tools", "translated:tool_choice | disable_parallel_tool_use"),
    "max_tokens": _field("sent", "translated:max_output_tokens", "translated:max_tokens"),
    "max_completion_tokens": _field("sent", "translated:max_output_tokens", "translated:max_tokens"),
    "temperature": _field("sent", "sent", "sent"),
    "top_p": _field("sent", "sent", "sent"),
    "reasoning_effort": _field("sent", "translated:reasoning", "translated:thinking"),
    "response_format": _field("sent", "translated:text", "translated:system | json_object as an instruction; json_schema becomes output_config.format"),
    "n": _field("sent", "refused", "refused", "only n = 1 is served by this upstream"),
    "logit_bias": _field("sent", "refused", "refused", "no counterpart in this upstream's API"),
    "audio": _field("sent", "refused", "refused", "no audio output on this upstream"),
    "modalities": _field("sent", "refused", "refused", "no audio output on this upstream"),
    "prediction": _field("sent", "refused", "refused", "no predicted outputs on this upstream"),
    "web_search_options": _field("sent", "refused", "refused", "no web search on this upstream"),
    "functions": _field("sent", "refused", "refused", "deprecated: use 'tools'"),
    "function_call": _field("sent", "refused", "refused", "deprecated: use 'tool_choice'"),
    "frequency_penalty": _field("sent", "announced", "announced", "not translated"),
    "presence_penalty": _field("sent", "announced", "announced", "not translated"),
    "stop": _field("sent", "announced", "announced", "not translated"),
    "seed": _field("sent", "announced", "announced", "not translated"),
    "logprobs": _field("sent", "announced", "announced", "not translated"),
    "top_logprobs": _field("sent", "announced", "announced", "not translated"),
    "user": _field("sent", "announced", "announced", "not translated"),
    "safety_identifier": _field("sent", "announced", "announced", "not translated"),
    "metadata": _field("sent", "announced", "announced", "not translated"),
    "store": _field("sent", "announced", "announced", "not translated"),
    "service_tier": _field("sent", "sent", "translated:service_tier | auto, priority and fast as auto, default as standard_only; flex and scale have no counterpart: not sent, announced"),
    "verbosity": _field("sent", "announced", "announced", "not translated"),
    "prompt_cache_key": _field("sent", "sent", "translated:messages | cache_control marks"),
    "prompt_cache_options": _field("sent", "sent", "translated:messages | cache_control marks: where (mode) and how long (ttl)"),
    "prompt_cache_retention": _field("sent", "sent", "translated:messages | cache_control marks"),
    "moderation": _field("sent", "announced", "announced", "not translated"),
}

# -- tools[].type ----------------------------------------------------------------------------
_CLIENT_RUN = "offered to the model as a function; a call comes back as the tool's own item, for the client to run"
_HOSTED = "run by a registry tool where the route maps it (hosted_tools); else passed through, or dropped and named in x-gateway-dropped-tools"
_OPENAI_HOSTED = "runs on OpenAI's servers: passed through, or dropped and named in x-gateway-dropped-tools"
TOOL_TYPES: dict[str, Entry] = {
    "function": _e(SERVED, "offered as a function; a bare {type, name} may name a registry tool"),
    **_client_run_tools(builtin=False),  # custom
    "namespace": _e(SERVED, "its members offered as functions"),
    **_client_run_tools(builtin=True),  # local_shell, shell, apply_patch, computer use
    "mcp": _e(SERVED, "the gateway lists and calls the MCP server"),
    "web_search": _e(PASSED, _HOSTED),
    "web_search_2025_08_26": _e(PASSED, _HOSTED),
    "web_search_preview": _e(PASSED, _HOSTED),
    "web_search_preview_2025_03_11": _e(PASSED, _HOSTED),
    "file_search": _e(SERVED, "run by the gateway over its own vector stores (its filters, max_num_results, ranking_options), for every upstream; by a registry tool where the route maps it (hosted_tools)"),
    "code_interpreter": _e(PASSED, _OPENAI_HOSTED),
    "image_generation": _e(PASSED, _OPENAI_HOSTED),
    "tool_search": _e(SERVED, "the gateway searches the deferred tools itself, on every upstream kind; execution: client hands the call to the client"),
    "programmatic_tool_calling": _e(PASSED, _OPENAI_HOSTED),
}

# -- input[].type ----------------------------------------------------------------------------
_HISTORY = "kept in the context as history; sent to no upstream (none of them produced it)"
INPUT_ITEM_TYPES: dict[str, Entry] = {
    "message": _e(SERVED),
    "item_reference": _e(SERVED, "resolved from the chain or conversation"),
    "function_call": _e(SERVED),
    "function_call_output": _e(SERVED, "must answer a call before it"),
    "reasoning": _e(SERVED, "sent back where the upstream takes it (sealed encrypted_content opened)"),
    "compaction": _e(SERVED, "the upstream context starts at its summary, after what its request's input placed before it"),
    "compaction_trigger": _e(SERVED, "last item only: the answer is one compaction item"),
    **_client_tool_items(_e(SERVED), _e(SERVED, "must answer a call before it")),
    "mcp_list_tools": _e(SERVED), "mcp_call": _e(SERVED), "mcp_approval_request": _e(SERVED),
    "mcp_approval_response": _e(SERVED, "must answer an approval request before it"),
    "web_search_call": _e(SERVED, _HISTORY),
    "file_search_call": _e(SERVED, _HISTORY),
    "code_interpreter_call": _e(SERVED, _HISTORY),
    "image_generation_call": _e(SERVED, _HISTORY),
    "tool_search_call": _e(SERVED, "a search the gateway (or the client) ran"),
    "tool_search_output": _e(SERVED, "the tools it found are offered again; a client's (execution: client) must answer its call"),
    "program": _e(SERVED, _HISTORY),
    "program_output": _e(SERVED, _HISTORY + "; must answer a call before it"),
    "additional_tools": _e(SERVED, "its tools are offered from that item on, for the rest of the response and the chain"),
    "configuration_update": _e(REFUSED, "configuration changes inside the context are not served: set the request's own fields"),
}

# -- input[].content[].type (a message's content parts) ---------------------------------------
_BY_FILE_ID = (
    "; by `file_id` (an upload of /v1/files, the tenant's own): the gateway reads the file and sends "
)
INPUT_CONTENT_TYPES: dict[str, Entry] = {
    "input_text": _e(SERVED),
    "input_image": _e(SERVED, "a URL or data URL" + _BY_FILE_ID + "it as a data URL (image content) on every upstream kind"),
    "input_file": _e(
        SERVED,
        "file_data or file_url" + _BY_FILE_ID + "a PDF as a document block to `anthropic`, as `file_data` to "
        "`responses`, as its extracted text (pypdf, at most GATEWAY_FILES_MAX_TEXT_CHARS) to "
        "`chat_completions`; a text file as its text; stored items keep the `file_id`",
    ),
}

# -- output[].type (what a Response, a conversation or input_items can hold) ------------------
_RELAYED = "relayed whole from a responses upstream that ran it"
OUTPUT_ITEM_TYPES: dict[str, Entry] = {
    "message": _e(SERVED), "reasoning": _e(SERVED), "function_call": _e(SERVED),
    **_client_tool_items(_e(SERVED), None),
    "mcp_list_tools": _e(SERVED), "mcp_call": _e(SERVED), "mcp_approval_request": _e(SERVED),
    "compaction": _e(SERVED),
    "web_search_call": _e(SERVED, "from a registry tool serving web_search, or " + _RELAYED),
    "file_search_call": _e(SERVED, "from the gateway's own file_search (results with include file_search_call.results) or a registry tool serving it"),
    "function_call_output": _e(SERVED, "in item lists, as the client or a registry tool gave it"),
    **_client_tool_items(None, _e(SERVED, "in item lists, as the client gave it")),
    "mcp_approval_response": _e(SERVED, "in item lists, as the client gave it"),
    "code_interpreter_call": _e(PASSED, _RELAYED),
    "image_generation_call": _e(PASSED, _RELAYED),
    "tool_search_call": _e(SERVED, "from the gateway's tool search (any upstream kind)"),
    "tool_search_output": _e(SERVED, "from the gateway's tool search (any upstream kind)"),
    "program": _e(PASSED, _RELAYED),
    "program_output": _e(PASSED, _RELAYED),
    "additional_tools": _e(SERVED, "in item lists, as the client gave it"),
    "configuration_update": _e(NOT_EMITTED, "the gateway changes no configuration inside a response"),
}

# -- WebSocket client messages ---------------------------------------------------------------
CLIENT_EVENTS: dict[str, Entry] = {
    "response.create": _e(SERVED, "stream: false and background: true are a 400 naming the field"),
    "response.steer": _e(SERVED, "queued into a running response of the connection, committed by a successor (README: steering)"),
}

# -- server events (SSE and WebSocket alike) -------------------------------------------------
_HOSTED_PROGRESS = "for a hosted call relayed from a responses upstream"
SERVER_EVENTS: dict[str, Entry] = {
    "response.created": _e(SERVED), "response.queued": _e(SERVED), "response.in_progress": _e(SERVED),
    "response.completed": _e(SERVED), "response.incomplete": _e(SERVED), "response.failed": _e(SERVED),
    "error": _e(SERVED),
    "response.output_item.added": _e(SERVED), "response.output_item.done": _e(SERVED),
    "response.content_part.added": _e(SERVED), "response.content_part.done": _e(SERVED),
    "response.output_text.delta": _e(SERVED), "response.output_text.done": _e(SERVED),
    "response.refusal.delta": _e(SERVED), "response.refusal.done": _e(SERVED),
    "response.reasoning_text.delta": _e(SERVED), "response.reasoning_text.done": _e(SERVED),
    "response.reasoning_summary_part.added": _e(SERVED), "response.reasoning_summary_part.done": _e(SERVED),
    "response.reasoning_summary_text.delta": _e(SERVED), "response.reasoning_summary_text.done": _e(SERVED),
    "response.function_call_arguments.delta": _e(SERVED), "response.function_call_arguments.done": _e(SERVED),
    "response.custom_tool_call_input.delta": _e(SERVED), "response.custom_tool_call_input.done": _e(SERVED),
    "response.mcp_call_arguments.delta": _e(SERVED), "response.mcp_call_arguments.done": _e(SERVED),
    "response.mcp_call.in_progress": _e(SERVED), "response.mcp_call.completed": _e(SERVED), "response.mcp_call.failed": _e(SERVED),
    "response.mcp_list_tools.in_progress": _e(SERVED), "response.mcp_list_tools.completed": _e(SERVED), "response.mcp_list_tools.failed": _e(SERVED),
    "response.web_search_call.in_progress": _e(SERVED), "response.web_search_call.searching": _e(SERVED), "response.web_search_call.completed": _e(SERVED),
    "response.file_search_call.in_progress": _e(SERVED), "response.file_search_call.searching": _e(SERVED), "response.file_search_call.completed": _e(SERVED),
    "response.code_interpreter_call.in_progress": _e(PASSED, _HOSTED_PROGRESS),
    "response.code_interpreter_call.interpreting": _e(PASSED, _HOSTED_PROGRESS),
    "response.code_interpreter_call.completed": _e(PASSED, _HOSTED_PROGRESS),
    "response.image_generation_call.in_progress": _e(PASSED, _HOSTED_PROGRESS),
    "response.image_generation_call.generating": _e(PASSED, _HOSTED_PROGRESS),
    "response.image_generation_call.completed": _e(PASSED, _HOSTED_PROGRESS),
    "response.steer.failed": _e(SERVED, "steering input refused, or not committed, handed back with a code"),
    "response.steer.accepted": _e(SERVED, "the steering input is queued"),
    "response.steer.pending": _e(SERVED, "queued input waits for the client's tool output or approval"),
    "response.compaction.compacting": _e(SERVED, "automatic compaction (context_management)"),
    "response.code_interpreter_call_code.delta": _e(NOT_EMITTED, "a relayed call comes whole, its code with it"),
    "response.code_interpreter_call_code.done": _e(NOT_EMITTED, "a relayed call comes whole, its code with it"),
    "response.image_generation_call.partial_image": _e(NOT_EMITTED, "a relayed call comes whole, its image with it"),
    "response.shell_call_command.added": _e(NOT_EMITTED, "shell calls come whole in output_item.done"),
    "response.shell_call_command.delta": _e(NOT_EMITTED, "shell calls come whole in output_item.done"),
    "response.shell_call_command.done": _e(NOT_EMITTED, "shell calls come whole in output_item.done"),
    "response.shell_call_output_content.delta": _e(NOT_EMITTED, "the client runs shell calls: there is no output to stream"),
    "response.shell_call_output_content.done": _e(NOT_EMITTED, "the client runs shell calls: there is no output to stream"),
    "response.output_text.annotation.added": _e(SERVED, "file_citation of the files a gateway-run file_search found, before output_text.done"),
    "response.audio.delta": _e(NOT_EMITTED, "no audio output"),
    "response.audio.done": _e(NOT_EMITTED, "no audio output"),
    "response.audio.transcript.delta": _e(NOT_EMITTED, "no audio output"),
    "response.audio.transcript.done": _e(NOT_EMITTED, "no audio output"),
}

# -- the beta surface (`client.beta.responses`: `?beta=true`, `openai-beta: responses_multi_agent=v1`)
# -- request headers clients send beside the body (HTTP, and the WebSocket handshake) --------
# Codex 0.171's own headers: none changes what the gateway does, none is refused, and none is
# sent to an upstream (a gateway builds its own upstream requests).
_CODEX = "Codex's own header: accepted, not read, sent to no upstream"
CLIENT_HEADERS: dict[str, Entry] = {
    "session_id": _e(Treatment.ACCEPTED, _CODEX),
    "originator": _e(Treatment.ACCEPTED, _CODEX),
    "version": _e(Treatment.ACCEPTED, _CODEX),
    "x-openai-subagent": _e(Treatment.ACCEPTED, _CODEX),
    "x-codex-window-id": _e(Treatment.ACCEPTED, _CODEX),
    "x-codex-parent-thread-id": _e(Treatment.ACCEPTED, _CODEX),
    "x-codex-installation-id": _e(Treatment.ACCEPTED, _CODEX),
    "x-codex-turn-metadata": _e(Treatment.ACCEPTED, _CODEX),
    "x-codex-turn-state": _e(Treatment.ACCEPTED, f"{_CODEX}; OpenAI's sticky routing, which one gateway process needs not"),
    "x-codex-root-turn-id": _e(Treatment.ACCEPTED, _CODEX),
    "x-codex-inference-call-id": _e(Treatment.ACCEPTED, _CODEX),
    "x-codex-routing-hint": _e(Treatment.ACCEPTED, f"{_CODEX}; routing is the gateway's own (model routes)"),
    "x-codex-beta-features": _e(Treatment.ACCEPTED, f"{_CODEX}; the features it names are served or not as the fields they send are"),
    "x-codex-cyber-access-program": _e(Treatment.ACCEPTED, f"{_CODEX}; as the `access_programs` field, no access programs here"),
    "x-codex-image-turn-id": _e(Treatment.ACCEPTED, _CODEX),
}

BETA = _e(REFUSED, "multi-agent responses are not served: a 400 naming 'beta'")
BETA_MESSAGE = (
    "The beta Responses surface ('?beta=true', 'openai-beta: responses_multi_agent=v1': multi-agent "
    "responses) is not served by this gateway; use the Responses API without it."
)
BETA_HEADER_VALUES = frozenset({"responses_multi_agent=v1"})
# fmt: on

# -- derived at import: what the request path reads ------------------------------------------


# The `anthropic-beta` values of /v1/messages (api/messages_views.py), as the pinned Claude Code
# and Anthropic's clients send them (tests/compat/test_claude_code.py fails on one not here). To
# an Anthropic route every beta is passed on as sent; on a translated route each only adds
# optional behaviour: ignored, named in x-gateway-ignored-fields (`anthropic-beta:<value>`),
# never refused. The note says what a translated route does instead.
ANTHROPIC_BETAS: dict[str, Entry] = {
    "claude-code-20250219": _e(Treatment.ANNOUNCED, "Claude Code's own marker; no behaviour of the API"),
    "interleaved-thinking-2025-05-14": _e(
        Treatment.ANNOUNCED, "thinking between tool calls; a translated route reasons as its upstream does"
    ),
    "context-management-2025-06-27": _e(
        Treatment.ANNOUNCED, "`context_management` (clearing old tool results and thinking): not applied"
    ),
    "mid-conversation-tool-changes-2026-07-01": _e(
        Treatment.ANNOUNCED, "tools may change between turns; a translated route sends each turn's"
    ),
    "thinking-token-count-2026-05-13": _e(Treatment.ANNOUNCED, "thinking tokens counted apart in usage; not reported"),
    "advanced-tool-use-2025-11-20": _e(Treatment.ANNOUNCED, "tool search and `defer_loading`; every tool is offered"),
    "effort-2025-11-24": _e(Treatment.ANNOUNCED, "`output_config.effort`: applied as the reasoning effort"),
    "prompt-caching-2024-07-31": _e(
        Treatment.ANNOUNCED, "`cache_control` marks; a translated upstream caches on its own"
    ),
    "token-counting-2024-11-01": _e(
        Treatment.ANNOUNCED, "/v1/messages/count_tokens: served (estimated on a translated route)"
    ),
    "fine-grained-tool-streaming-2025-05-14": _e(
        Treatment.ANNOUNCED, "tool input streamed unbuffered; a translated route sends each call whole"
    ),
    "output-128k-2025-02-19": _e(Treatment.ANNOUNCED, "longer outputs; max_tokens is passed on as asked"),
    "structured-outputs-2025-11-13": _e(
        Treatment.ANNOUNCED, "`output_format`: not applied (use `output_config.format`)"
    ),
}


def _names(table: dict[str, Entry], *treatments: Treatment) -> frozenset[str]:
    return frozenset(name for name, entry in table.items() if entry.treatment in treatments)


# Hosted tools: served by a registry tool, passed through, or dropped (x-gateway-dropped-tools).
# `tool_search` and `file_search` are the gateway's own (protocol/tool_search.py,
# orchestration/vector_stores.py) but, like these, are parsed apart
# from the function tools (protocol/tools.normalize_tools skips it; request.py adds it).
HOSTED_TOOL_TYPES = _names(TOOL_TYPES, PASSED) | {"tool_search", "file_search"}
# Items of hosted tools: history in the context, relayed whole from a responses upstream (or,
# for tool search, written by the gateway's own search).
HOSTED_ITEM_TYPES = _names(INPUT_ITEM_TYPES, SERVED) & (
    _names(OUTPUT_ITEM_TYPES, PASSED)
    | {"web_search_call", "file_search_call", "tool_search_call", "tool_search_output"}
)
REFUSED_INPUT_ITEMS = {name: entry.note for name, entry in INPUT_ITEM_TYPES.items() if entry.treatment is REFUSED}
REFUSED_REQUEST_FIELDS = {name: field.why for name, field in REQUEST_FIELDS.items() if field.treatment is REFUSED}
REFUSED_CLIENT_EVENTS = _names(CLIENT_EVENTS, REFUSED)


# The fields announced on a route, by the kinds of its targets (a handful of combinations).
_announced_on: dict[frozenset[str], frozenset[str]] = {}


def _announced(table: dict[str, RequestField], kind: str) -> frozenset[str]:
    return frozenset(name for name, field in table.items() if field.on(kind).handling is Handling.ANNOUNCED)


# Per upstream kind, the fields sent as is: the dialect builders send the plain ones from these.
SENT_FIELDS: dict[str, frozenset[str]] = {}
# Per upstream kind, the fields (and parts, dotted) that kind does not apply.
ANNOUNCED_FIELDS: dict[str, frozenset[str]] = {}
ANNOUNCED_CHAT_FIELDS: dict[str, frozenset[str]] = {}
# Per upstream kind, the fields that kind refuses, and why (those every kind refuses are the
# parser's REFUSED_REQUEST_FIELDS; the others are refused once the route is known).
REFUSED_ON: dict[str, dict[str, str]] = {}
# Fields some kind does not apply or refuses (but not every kind), and the parts of fields
# classified apart: what a request's candidates are picked from.
_MAYBE_ANNOUNCED: frozenset[str] = frozenset()
_PARTS: dict[str, tuple[str, ...]] = {}
for _name in REQUEST_FIELDS:
    if "." in _name:
        _outer, _inner = _name.split(".", 1)
        _PARTS[_outer] = (*_PARTS.get(_outer, ()), _inner)
# Fields every kind applies (or every kind refuses: the parser did), with no part classified
# apart: never a candidate.
_QUIET: frozenset[str] = frozenset()


def _derive() -> None:
    """(Re)compute the per-kind tables from the columns: at import, and when a column comes or
    goes. The dicts are updated in place (the dialect builders imported them by name)."""
    global _MAYBE_ANNOUNCED, _QUIET
    for table in (SENT_FIELDS, ANNOUNCED_FIELDS, ANNOUNCED_CHAT_FIELDS, REFUSED_ON):
        table.clear()
    for kind in UPSTREAM_KINDS:
        SENT_FIELDS[kind] = frozenset(
            name for name, field in REQUEST_FIELDS.items() if field.on(kind).handling is Handling.SENT
        )
        ANNOUNCED_FIELDS[kind] = _announced(REQUEST_FIELDS, kind)
        ANNOUNCED_CHAT_FIELDS[kind] = _announced(CHAT_FIELDS, kind)
        REFUSED_ON[kind] = {
            name: field.why for name, field in REQUEST_FIELDS.items() if field.on(kind).handling is Handling.REFUSED
        }
    _MAYBE_ANNOUNCED = frozenset().union(*ANNOUNCED_FIELDS.values(), *REFUSED_ON.values()) - set(REFUSED_REQUEST_FIELDS)
    _QUIET = frozenset(name for name in REQUEST_FIELDS if name not in _MAYBE_ANNOUNCED and name not in _PARTS)
    _announced_on.clear()


def add_column(
    kind: str,
    request: Mapping[str, str],
    chat: Mapping[str, str],
    default: str,
    reported: frozenset[str] = frozenset(),
) -> None:
    """A dialect's column in both tables: `request` and `chat` map field names to specs (as the
    rows write them: `"sent"`, `"translated:KEY | note"`, ...), every other field gets `default`;
    `reported` are the fields whose use its adapter reports (REPORTED_FIELDS). A field every
    dialect refuses stays refused (the parser refuses it before the route is known); one the
    gateway applies on every dialect is applied by the gateway on this one too."""
    global UPSTREAM_KINDS
    if kind in UPSTREAM_KINDS:
        raise ValueError(f"the surface table has a column {kind!r} already")
    unknown = (request.keys() - REQUEST_FIELDS.keys()) | (chat.keys() - CHAT_FIELDS.keys())
    if unknown:
        raise ValueError(f"column {kind!r} names fields the table does not have: {sorted(unknown)}")
    for table, specs in ((REQUEST_FIELDS, request), (CHAT_FIELDS, chat)):
        for name, field in table.items():
            refused = field.treatment is REFUSED and table is REQUEST_FIELDS
            if refused and name in specs and _dialect(specs[name]).handling is not Handling.REFUSED:
                raise ValueError(f"{name!r} is refused by every dialect: column {kind!r} cannot take it")
            if refused:
                field.columns[kind] = _dialect("refused")
            elif name in specs:
                field.columns[kind] = _dialect(specs[name])
            elif {d.handling for d in field.columns.values()} == {Handling.GATEWAY}:
                field.columns[kind] = field.columns[UPSTREAM_KINDS[0]]  # the gateway's own, whatever the upstream
            else:
                field.columns[kind] = _dialect(default)
    UPSTREAM_KINDS = (*UPSTREAM_KINDS, kind)
    REPORTED_FIELDS[kind] = reported
    _derive()


def remove_column(kind: str) -> None:
    """Take out a column `add_column` added."""
    global UPSTREAM_KINDS
    UPSTREAM_KINDS = tuple(k for k in UPSTREAM_KINDS if k != kind)
    for table in (REQUEST_FIELDS, CHAT_FIELDS):
        for field in table.values():
            del field.columns[kind]
    del REPORTED_FIELDS[kind]
    _derive()


def unapplied_candidates(body: dict[str, Any]) -> tuple[str, ...]:
    """The fields (and dotted parts) of a create body that some upstream kind does not apply
    or refuses, or that no entry classifies (a newer SDK's): what `refused_on_route` and
    `unapplied_fields` pick from once the route's kinds are known. A part is a key of an object field or a value of an array field
    (`include`); a default (`text.format` of type `text`) asks for nothing."""
    noisy = body.keys() - _QUIET  # most requests: only fields every kind applies
    if not noisy:
        return ()
    found: list[str] = []
    for name, value in body.items():
        if value is None or name not in noisy:
            continue
        parts = _PARTS.get(name)
        if parts is None:
            if name in _MAYBE_ANNOUNCED or name not in REQUEST_FIELDS:
                found.append(name)
            continue
        if isinstance(value, dict):
            present = [p for p in parts if value.get(p) is not None and not _is_default(p, value[p])]
            rest = any(key not in parts for key in value)
        elif isinstance(value, list):
            present = [p for p in parts if p in value]
            rest = any(entry not in parts for entry in value)
        else:
            present, rest = [], True
        found += [f"{name}.{part}" for part in present if f"{name}.{part}" in _MAYBE_ANNOUNCED]
        if rest and name in _MAYBE_ANNOUNCED:
            found.append(name)  # what the parts classified apart leave
    return tuple(found)


def _is_default(part: str, value: Any) -> bool:
    return part == "format" and isinstance(value, dict) and value.get("type") == "text"


def unapplied_fields(candidates: tuple[str, ...], kinds: frozenset[str] | set[str]) -> list[str]:
    """Of a request's candidates, those that a route with targets of these kinds may not
    apply (any kind that does not: which target answers is known only after the fallback)."""
    if not candidates:
        return []
    key = frozenset(kinds)
    announced = _announced_on.get(key)
    if announced is None:
        announced = _announced_on[key] = frozenset().union(*(ANNOUNCED_FIELDS.get(kind, ()) for kind in key))
    return [name for name in candidates if name in announced or name not in REQUEST_FIELDS]


# Fields whose use on an upstream kind depends on the request's value or the provider's options:
# each target's translation reports whether it applies them (protocol/chat.py and anthropic.py,
# `applied_fields`), and `ignored_fields` goes by that report instead of the table alone.
REPORTED_FIELDS: dict[str, frozenset[str]] = {
    "chat_completions": frozenset(
        {"prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "service_tier"}
    ),
    "responses": frozenset(),
    "anthropic": frozenset({"service_tier"}),
}
_derive()


def ignored_fields(candidates: tuple[str, ...], reports: list[tuple[str, frozenset[str]]]) -> list[str]:
    """Of a request's candidates, those that some target of its route does not apply (which one
    answers is known only after the fallback): `reports` holds, per target, its kind and what its
    translation reports it applies of that kind's REPORTED_FIELDS; the table says the rest."""
    ignored = []
    for name in candidates:
        for kind, applied in reports:
            if name in REPORTED_FIELDS[kind]:
                unapplied = name not in applied
            else:
                unapplied = name in ANNOUNCED_FIELDS[kind] or name not in REQUEST_FIELDS
            if unapplied:
                ignored.append(name)
                break
    return ignored


def refused_on_route(candidates: tuple[str, ...], kinds: frozenset[str] | set[str]) -> tuple[str, str] | None:
    """The first candidate a kind of the route refuses, and why (None: none is)."""
    for name in candidates:
        for kind in kinds:
            why = REFUSED_ON.get(kind, {}).get(name)
            if why is not None:
                return name, why
    return None


def header_names(names: list[str]) -> str:
    """`x-gateway-ignored-fields`' value: the names, comma-separated, each percent-encoded
    beyond the characters field names use. Unknown fields (a newer SDK's) are accepted and named
    there, and a client may send any name: one with a line break, a comma or a non-Latin-1
    character was a 500 (no header can hold it) or would split into two names."""
    return ",".join(quote(name, safe="._-[]") for name in names)


def unapplied_chat_fields(body: dict[str, Any], kind: str, applied: frozenset[str] | None = None) -> list[str]:
    """The fields of a `/v1/chat/completions` body that a target of this kind does not apply
    (translated for it: `applied`, what its translation reports it applies of REPORTED_FIELDS)."""
    announced = ANNOUNCED_CHAT_FIELDS[kind]
    reported = REPORTED_FIELDS[kind] if applied is not None else frozenset()
    used = applied or frozenset()
    return [
        name
        for name, value in body.items()
        if value is not None
        and ((name not in used) if name in reported else (name in announced or name not in CHAT_FIELDS))
    ]


def beta_requested(query_string: str, beta_header: str | None) -> bool:
    """Whether a request asks for the beta surface: `?beta=true`, or an `openai-beta` header
    naming a beta of the Responses API this gateway does not serve (Codex's own
    `openai-beta: responses_websockets=...` is not one)."""
    if beta_header and any(v.strip() in BETA_HEADER_VALUES for v in beta_header.split(",")):
        return True
    if "beta" not in query_string:
        return False
    from urllib.parse import parse_qsl

    return any(key == "beta" and value.lower() != "false" for key, value in parse_qsl(query_string))


# -- the README's table ----------------------------------------------------------------------


README_BEGIN = "<!-- surface table: generated by `manage.py surface_table` from responses_api/protocol/surface.py -->"
README_END = "<!-- end of the surface table -->"


def with_tables(readme: str) -> str:
    """`readme` with the text between its surface markers replaced by `markdown_tables()`."""
    start, end = readme.index(README_BEGIN) + len(README_BEGIN), readme.index(README_END)
    return readme[:start] + "\n\n" + markdown_tables() + "\n" + readme[end:]


def _cells(field: RequestField) -> str:
    """The per-kind cells of a row; a treatment the same on every kind is written once."""
    texts = [field.on(kind).describe() for kind in UPSTREAM_KINDS]
    if len(set(texts)) == 1:
        texts[1:] = ["same"] * (len(texts) - 1)
    return " | ".join(texts)


def markdown_tables() -> str:
    """README.md's surface tables (written between its markers by `manage.py surface_table`)."""
    columns = " | ".join(f"`{kind}`" for kind in UPSTREAM_KINDS)
    out = [
        "#### Create-request fields, per upstream kind",
        "",
        f"| field | treatment | {columns} | why |",
        "|---|---|" + "---|" * len(UPSTREAM_KINDS) + "---|",
    ]
    for name, field in REQUEST_FIELDS.items():
        out.append(f"| `{name}` | {field.treatment} | {_cells(field)} | {field.why} |")
    out += [
        "",
        "#### `/v1/chat/completions` fields, per upstream kind",
        "",
        f"| field | {columns} | why |",
        "|---|" + "---|" * len(UPSTREAM_KINDS) + "---|",
    ]
    for name, field in CHAT_FIELDS.items():
        out.append(f"| `{name}` | {_cells(field)} | {field.why} |")
    for title, table in (
        ("Tool types (`tools[].type`)", TOOL_TYPES),
        ("Input item types (`input[].type`)", INPUT_ITEM_TYPES),
        ("Input content parts (`input[].content[].type`)", INPUT_CONTENT_TYPES),
        ("Output item types", OUTPUT_ITEM_TYPES),
        ("WebSocket client messages", CLIENT_EVENTS),
        ("Client request headers", CLIENT_HEADERS),
        ("Server events (SSE and WebSocket)", SERVER_EVENTS),
    ):
        out += ["", f"#### {title}", "", "| type | treatment | note |", "|---|---|---|"]
        out += [f"| `{name}` | {entry.treatment} | {entry.note} |" for name, entry in table.items()]
    out += [
        "",
        "#### `anthropic-beta` values (`/v1/messages`)",
        "",
        "Passed on as sent to an Anthropic route; on a Chat Completions or Responses route:",
        "",
        "| value | treatment | note |",
        "|---|---|---|",
    ]
    out += [f"| `{name}` | {entry.treatment} | {entry.note} |" for name, entry in ANTHROPIC_BETAS.items()]
    out += [
        "",
        "#### The beta surface",
        "",
        f"`?beta=true`, `openai-beta: responses_multi_agent=v1`: {BETA.treatment} ({BETA.note}).",
    ]
    return "\n".join(out) + "\n"
