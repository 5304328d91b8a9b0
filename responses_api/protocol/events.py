"""The event builder: neutral upstream deltas in, Open Responses stream events out.

A state machine over one Response. It owns `sequence_number` (from 0, +1 per
event, across every upstream call of a tool loop) and `output_index` (dense,
in the order of `output_item.added`), opens and closes items and content
parts in the order the protocol requires, and keeps the Response's `output`
current so that the non-streaming path can take the final state of the same
machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import tool_search
from .client_tool_types import CLIENT_TOOL_TYPES
from .client_tools import SERVABLE_HOSTED_TOOLS, call_item, hosted_call_item
from .deltas import (
    Delta,
    Finish,
    OutputItem,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    ResponseFields,
    TextDelta,
    ToolCallDelta,
    Usage,
    add_counts,
)
from .errors import GatewayError
from .ids import new_id
from .mcp_tools import McpBinding
from .tools import Tool
from .wirejson import copy_json

T = TypeVar("T")


def _same(value: T) -> T:
    return value


Event = dict[str, Any]

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


@dataclass(slots=True)
class _OpenPart:
    kind: str  # output_text | refusal | reasoning_text | summary_text
    index: int
    chunks: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _OpenItem:
    output_index: int
    item: dict[str, Any]  # the live item inside response["output"]
    part: _OpenPart | None = None
    arguments: list[str] = field(default_factory=list)  # function calls only
    upstream_name: str | None = None  # tool calls: the function name the upstream called


@dataclass(slots=True)
class _PendingCall:
    """A tool call whose name has not arrived yet: nothing can be opened before it."""

    call_id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class EventBuilder:
    def __init__(
        self,
        response: dict[str, Any],
        *,
        allowed_tools: frozenset[str] | None = None,
        sequence_number: int = 0,
        mcp_bindings: dict[str, McpBinding] | None = None,
        tools: list[Tool] | None = None,
        reasoning_summary: bool = False,
        seal_reasoning: Callable[[str], str] | None = None,
        seal_signed: Callable[[str, str], str] | None = None,
        file_search_results: bool = False,
    ) -> None:
        """`tools`: the function-offered tools whose calls become other items (namespace members,
        custom tools, client built-ins). `reasoning_summary`: the client asked for reasoning
        summaries; an upstream's reasoning text is then streamed as the summary (the only text
        an open model gives; see README). `seal_reasoning`: turns a reasoning item's text into
        its `encrypted_content` (include: reasoning.encrypted_content). `seal_signed`: the same for
        reasoning the upstream signed (text, signature), always: the upstream needs it back."""
        self.response = response
        self.output: list[dict[str, Any]] = response["output"]
        self.sequence_number = sequence_number
        self.allowed_tools = allowed_tools
        self.usage = Usage()
        # What the response says beside `usage`: an upstream's `prompt_cache_diagnostics` (its
        # last call's) and `tool_usage` (every call's, added to the gateway's served tools').
        self.passed: dict[str, Any] = {}
        # Reasoning items of the context a model call was not given (input_transformations).
        self._withheld: dict[str, None] = {}
        self.finish_reason: str | None = None
        self._content_item: _OpenItem | None = None  # the open message or reasoning item
        self._calls: dict[int, _OpenItem] = {}  # open function calls by upstream index
        self._pending: dict[int, _PendingCall] = {}
        self._suppressed: set[int] = set()  # calls to tools outside the allowed set
        self.step_calls: list[dict[str, Any]] = []  # function_call items of the current step
        self.dropped_calls = 0
        # Function names the model sees that are MCP tools: their calls become mcp_call items
        # (or mcp_approval_request items when the policy wants a human first).
        self.mcp_bindings: dict[str, McpBinding] = dict(mcp_bindings or {})
        self.step_mcp_calls: list[dict[str, Any]] = []  # open mcp_call items awaiting execution
        self.step_approvals: list[dict[str, Any]] = []  # mcp_approval_request items of this step
        self._running: dict[str, _OpenItem] = {}  # mcp_call items open while they execute
        self.tool_kinds: dict[str, Tool] = {t.name: t for t in tools or [] if t.kind != "function" or t.namespace}
        # Hosted tools served by a registry tool: open while the gateway runs them.
        self.step_hosted_calls: list[dict[str, Any]] = []
        # item id -> the call as the model made it, and its output: what the model sees next.
        self.hosted_outputs: dict[str, dict[str, Any]] = {}
        self.step_search_calls: list[dict[str, Any]] = []  # tool_search_call items the gateway answers
        self.reasoning_summary = reasoning_summary
        self.seal_reasoning = seal_reasoning
        self.seal_signed = seal_signed
        # file_search served by the gateway: its results on the call item (include:
        # file_search_call.results), and the files found, which the answer's text may cite.
        self.file_search_results = file_search_results
        self._found_files: dict[str, str] = {}  # filename -> file id
        self._signature: str | None = None  # of the open reasoning item

    @property
    def open_content_type(self) -> str | None:
        """The type of the message or reasoning item being streamed, if one is open."""
        return self._content_item.item["type"] if self._content_item is not None else None

    # -- low level -------------------------------------------------------------
    _copy: Callable[[T], T] = staticmethod(copy_json)  # what an event holds: a copy of the state

    def _event(self, type_: str, **fields: Any) -> Event:
        event = {"type": type_, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return self._copy(self.response)

    def discard_events(self) -> None:
        """Nobody reads the events from now on (a non-streamed response: only the final state
        counts): they may share objects with the builder's state instead of each holding a copy
        (bench: a fifth of the engine's CPU for a short answer)."""
        self._copy = _same

    # -- lifecycle -------------------------------------------------------------
    def start(self, *, queued: bool = False) -> list[Event]:
        """`response.created` (+ `response.queued`) or `response.created` + `response.in_progress`."""
        if queued:
            self.response["status"] = "queued"
            snap = self._snapshot()
            return [self._event("response.created", response=snap), self._event("response.queued", response=snap)]
        self.response["status"] = "in_progress"
        snap = self._snapshot()
        return [
            self._event("response.created", response=snap),
            self._event("response.in_progress", response=self._copy(snap)),
        ]

    def begin(self) -> list[Event]:
        """A queued response taken by a worker."""
        self.response["status"] = "in_progress"
        return [self._event("response.in_progress", response=self._snapshot())]

    # -- deltas ----------------------------------------------------------------
    def feed(self, delta: Delta) -> list[Event]:
        if isinstance(delta, TextDelta):
            return self._content(delta.text, "message", "output_text") if delta.text else []
        if isinstance(delta, RefusalDelta):
            return self._content(delta.text, "message", "refusal") if delta.text else []
        if isinstance(delta, ReasoningDelta):
            if not delta.text:
                return []
            return self._content(
                delta.text, "reasoning", "summary_text" if self.reasoning_summary else "reasoning_text"
            )
        if isinstance(delta, ToolCallDelta):
            return self._tool_call(delta)
        if isinstance(delta, OutputItem):
            events = self._close_calls() if (self._calls or self._pending) else []
            return events + self._close_content_item() + self._relay_item(copy_json(delta.item))
        if isinstance(delta, ReasoningSignature):
            open_item = self._content_item
            if open_item is not None and open_item.item["type"] == "reasoning":
                self._signature = delta.signature
            return []
        if isinstance(delta, Usage):
            self.usage = self.usage + delta
            return []
        if isinstance(delta, ResponseFields):
            for name, value in delta.fields.items():
                self.passed[name] = add_counts(self.passed.get(name) or {}, value) if name == "tool_usage" else value
            return []
        if isinstance(delta, Finish):
            self.finish_reason = delta.reason
            return []
        raise TypeError(f"unknown delta {delta!r}")

    def _open_item(self, item: dict[str, Any]) -> tuple[_OpenItem, Event]:
        output_index = len(self.output)
        self.output.append(item)
        return _OpenItem(output_index, item), self._event(
            "response.output_item.added", output_index=output_index, item=self._copy(item)
        )

    def _content(self, text: str, item_type: str, part_kind: str) -> list[Event]:
        events: list[Event] = []
        if self._calls or self._pending:
            events += self._close_calls()
        open_item = self._content_item
        if open_item is not None and open_item.item["type"] != item_type:
            events += self._close_content_item()
            open_item = None
        if open_item is None:
            if item_type == "message":
                item = {
                    "id": new_id("msg"),
                    "type": "message",
                    "status": "in_progress",
                    "role": "assistant",
                    "content": [],
                }
            else:
                item = {"id": new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": [], "content": []}
            open_item, added = self._open_item(item)
            events.append(added)
            self._content_item = open_item
        if open_item.part is not None and open_item.part.kind != part_kind:
            events += self._close_part(open_item)
        if open_item.part is None:
            events += self._open_part(open_item, part_kind)
        part = open_item.part
        assert part is not None
        part.chunks.append(text)
        if part_kind == "summary_text":
            events.append(
                self._event(
                    "response.reasoning_summary_text.delta",
                    item_id=open_item.item["id"],
                    output_index=open_item.output_index,
                    summary_index=part.index,
                    delta=text,
                )
            )
            return events
        if part_kind == "output_text":
            # The event of nearly every relayed token: built in place, as _event would (same keys,
            # same order), without its keyword merges.
            events.append(
                {
                    "type": "response.output_text.delta",
                    "sequence_number": self.sequence_number,
                    "item_id": open_item.item["id"],
                    "output_index": open_item.output_index,
                    "content_index": part.index,
                    "delta": text,
                    "logprobs": [],
                }
            )
            self.sequence_number += 1
            return events
        base = {"item_id": open_item.item["id"], "output_index": open_item.output_index, "content_index": part.index}
        if part_kind == "refusal":
            events.append(self._event("response.refusal.delta", **base, delta=text))
        else:
            events.append(self._event("response.reasoning_text.delta", **base, delta=text))
        return events

    @staticmethod
    def _empty_part(kind: str) -> dict[str, Any]:
        if kind == "output_text":
            return {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        if kind == "refusal":
            return {"type": "refusal", "refusal": ""}
        return {"type": kind, "text": ""}  # reasoning_text | summary_text

    def _open_part(self, open_item: _OpenItem, kind: str) -> list[Event]:
        if kind == "summary_text":
            summary = open_item.item["summary"]
            open_item.part = _OpenPart(kind, len(summary))
            summary.append(self._empty_part(kind))
            return [
                self._event(
                    "response.reasoning_summary_part.added",
                    item_id=open_item.item["id"],
                    output_index=open_item.output_index,
                    summary_index=open_item.part.index,
                    part=self._empty_part(kind),
                )
            ]
        content = open_item.item["content"]
        open_item.part = _OpenPart(kind, len(content))
        part = self._empty_part(kind)
        content.append(part)
        return [
            self._event(
                "response.content_part.added",
                item_id=open_item.item["id"],
                output_index=open_item.output_index,
                content_index=open_item.part.index,
                part=dict(part),
            )
        ]

    def _close_part(self, open_item: _OpenItem) -> list[Event]:
        part = open_item.part
        assert part is not None
        open_item.part = None
        text = "".join(part.chunks)
        final = self._empty_part(part.kind)
        final["refusal" if part.kind == "refusal" else "text"] = text
        if part.kind == "summary_text":
            open_item.item["summary"][part.index] = final
            base = {
                "item_id": open_item.item["id"],
                "output_index": open_item.output_index,
                "summary_index": part.index,
            }
            return [
                self._event("response.reasoning_summary_text.done", **base, text=text),
                self._event("response.reasoning_summary_part.done", **base, part=self._copy(final)),
            ]
        annotated: list[Event] = []
        base = {"item_id": open_item.item["id"], "output_index": open_item.output_index, "content_index": part.index}
        if part.kind == "output_text" and self._found_files:  # the files a gateway file_search found
            final["annotations"] = file_citations(text, self._found_files)
            annotated = [
                self._event("response.output_text.annotation.added", **base, annotation_index=i, annotation=dict(a))
                for i, a in enumerate(final["annotations"])
            ]
        open_item.item["content"][part.index] = final
        if part.kind == "output_text":
            done = self._event("response.output_text.done", **base, text=text, logprobs=[])
        elif part.kind == "refusal":
            done = self._event("response.refusal.done", **base, refusal=text)
        else:
            done = self._event("response.reasoning_text.done", **base, text=text)
        return [*annotated, done, self._event("response.content_part.done", **base, part=self._copy(final))]

    def _close_content_item(self, status: str = "completed") -> list[Event]:
        open_item = self._content_item
        if open_item is None:
            return []
        self._content_item = None
        events = self._close_part(open_item) if open_item.part is not None else []
        open_item.item["status"] = status
        if open_item.item["type"] == "reasoning" and self._signature is not None and self.seal_signed is not None:
            open_item.item["encrypted_content"] = self.seal_signed(reasoning_text(open_item.item), self._signature)
        elif open_item.item["type"] == "reasoning" and self.seal_reasoning is not None:
            open_item.item["encrypted_content"] = self.seal_reasoning(reasoning_text(open_item.item))
        self._signature = None
        events.append(
            self._event(
                "response.output_item.done",
                output_index=open_item.output_index,
                item=self._copy(open_item.item),
            )
        )
        return events

    # -- tool calls --------------------------------------------------------------
    def _tool_call(self, delta: ToolCallDelta) -> list[Event]:
        index = delta.index
        if index in self._suppressed:
            return []
        open_call = self._calls.get(index)
        if open_call is not None:
            if not delta.arguments:
                return []
            open_call.arguments.append(delta.arguments)
            return self._arguments_delta(open_call, delta.arguments)
        pending = self._pending.setdefault(index, _PendingCall())
        pending.call_id = pending.call_id or delta.call_id
        pending.name = pending.name or delta.name
        if delta.arguments:
            pending.arguments.append(delta.arguments)
        if not pending.name:
            return []  # wait for the name: output_item.added must carry it
        del self._pending[index]
        if self.allowed_tools is not None and pending.name not in self.allowed_tools:
            self._suppressed.add(index)
            self.dropped_calls += 1
            return []
        events = self._close_content_item()
        binding = self.mcp_bindings.get(pending.name)
        tool = self.tool_kinds.get(pending.name)
        call_id = pending.call_id or new_id("call")
        if binding is None and tool is not None and tool.kind == "tool_search":
            item = tool_search.call_item(call_id, client=tool.source == "client")
        elif binding is None and tool is not None and tool.kind in SERVABLE_HOSTED_TOOLS:
            item = hosted_call_item(tool.kind, "", "in_progress")
            self.hosted_outputs[item["id"]] = {"name": pending.name, "call_id": call_id}
        elif binding is None and tool is not None and tool.kind != "function":
            item = call_item(
                tool.kind,
                name=tool.item_name,
                namespace=tool.namespace,
                call_id=call_id,
                arguments="",
                status="in_progress",
            )
        elif binding is None:
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "status": "in_progress",
                "call_id": call_id,
                "name": pending.name,
                "arguments": "",
            }
            if tool is not None:  # a namespace member: named as the client declared it
                item["name"], item["namespace"] = tool.item_name, tool.namespace
        elif binding.requires_approval:
            item = {
                "id": new_id("mcpr"),
                "type": "mcp_approval_request",
                "server_label": binding.server_label,
                "name": binding.tool_name,
                "arguments": "",
            }
        else:
            item = {
                "id": new_id("mcp"),
                "type": "mcp_call",
                "status": "in_progress",
                "server_label": binding.server_label,
                "name": binding.tool_name,
                "arguments": "",
                "output": None,
                "error": None,
                "approval_request_id": None,
            }
        open_call, added = self._open_item(item)
        open_call.upstream_name = pending.name
        events.append(added)
        if item["type"] in ("mcp_call", "web_search_call", "file_search_call"):
            events.append(
                self._event(
                    f"response.{item['type']}.in_progress", item_id=item["id"], output_index=open_call.output_index
                )
            )
        self._calls[index] = open_call
        if pending.arguments:
            joined = "".join(pending.arguments)
            open_call.arguments.append(joined)
            events += self._arguments_delta(open_call, joined)
        return events

    def _arguments_delta(self, open_call: _OpenItem, delta: str) -> list[Event]:
        kind = open_call.item["type"]
        if kind not in ("function_call", "mcp_call"):
            # Approval requests arrive whole; a client tool's item is built from the complete
            # arguments (its JSON cannot be split into the item's fields before it ends).
            return []
        name = "response.mcp_call_arguments.delta" if kind == "mcp_call" else "response.function_call_arguments.delta"
        return [self._event(name, item_id=open_call.item["id"], output_index=open_call.output_index, delta=delta)]

    def _close_calls(self, last_status: str = "completed") -> list[Event]:
        events: list[Event] = []
        # A call whose name never arrived cannot be reported; count it as dropped.
        self.dropped_calls += len(self._pending)
        self._pending.clear()
        calls = sorted(self._calls.values(), key=lambda c: c.output_index)
        self._calls.clear()
        for n, call in enumerate(calls):
            arguments = "".join(call.arguments)
            call.item["arguments"] = arguments
            kind = call.item["type"]
            if kind == "mcp_call":
                # Stays open while it runs: closed by finish_mcp_call (or skip_mcp_calls).
                events.append(
                    self._event(
                        "response.mcp_call_arguments.done",
                        item_id=call.item["id"],
                        output_index=call.output_index,
                        arguments=arguments,
                    )
                )
                self._running[call.item["id"]] = call
                self.step_mcp_calls.append(call.item)
                continue
            if kind == "mcp_approval_request":
                events.append(
                    self._event(
                        "response.output_item.done",
                        output_index=call.output_index,
                        item=self._copy(call.item),
                    )
                )
                self.step_approvals.append(call.item)
                continue
            if kind in ("web_search_call", "file_search_call"):
                # Stays open while the registry tool runs: closed by finish_hosted_call.
                tool = self.tool_kinds[call.upstream_name or ""]
                call.item.update(hosted_call_item(tool.kind, arguments, "searching", call.item["id"]))
                self.hosted_outputs[call.item["id"]]["arguments"] = arguments
                events.append(
                    self._event(f"response.{kind}.searching", item_id=call.item["id"], output_index=call.output_index)
                )
                self._running[call.item["id"]] = call
                self.step_hosted_calls.append(call.item)
                continue
            status = last_status if n == len(calls) - 1 else "completed"
            if kind == "tool_search_call":
                call.item["arguments"], call.item["status"] = tool_search.call_arguments(arguments), status
                events.append(
                    self._event("response.output_item.done", output_index=call.output_index, item=self._copy(call.item))
                )
                # The gateway answers a server search; a client's is returned for the client to answer.
                client = call.item["execution"] == "client"
                (self.step_calls if client else self.step_search_calls).append(call.item)
                continue
            if kind != "function_call":
                events += self._close_client_tool_call(call, arguments, status)
                continue
            call.item["status"] = status
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=call.item["id"],
                    output_index=call.output_index,
                    name=call.item["name"],
                    arguments=arguments,
                )
            )
            events.append(
                self._event(
                    "response.output_item.done",
                    output_index=call.output_index,
                    item=self._copy(call.item),
                )
            )
            self.step_calls.append(call.item)
        return events

    def _close_client_tool_call(self, call: _OpenItem, arguments: str, status: str) -> list[Event]:
        """A custom tool's or client built-in's call, complete: its item from the arguments."""
        opened = call.item
        tool = self.tool_kinds[call.upstream_name or ""]
        final = call_item(
            tool.kind,
            name=tool.item_name,
            namespace=tool.namespace,
            call_id=opened["call_id"],
            arguments=arguments,
            status=status,
        )
        final["id"] = opened["id"]
        opened.clear()
        opened.update(final)
        events: list[Event] = []
        streamed = CLIENT_TOOL_TYPES.of_call(final["type"])
        field = streamed.streamed_field if streamed is not None else None
        if field is not None:  # custom: response.custom_tool_call_input.delta and .done
            base = {"item_id": final["id"], "output_index": call.output_index}
            name = f"response.{final['type']}_{field}"
            if final[field]:
                events.append(self._event(f"{name}.delta", **base, delta=final[field]))
            events.append(self._event(f"{name}.done", **base, **{field: final[field]}))
        events.append(self._event("response.output_item.done", output_index=call.output_index, item=self._copy(final)))
        self.step_calls.append(final)
        return events

    def end_step(self) -> list[Event]:
        """Close every open item at the end of one upstream call.

        With `finish_reason` length or content_filter the last open item ends
        `incomplete` (and the response will be incomplete)."""
        truncated = self.finish_reason in INCOMPLETE_REASONS
        status = "incomplete" if truncated else "completed"
        # A content item and tool calls are never open together: opening one closes the other.
        events = self._close_content_item(status)
        events += self._close_calls(status)
        return events

    def new_step(self) -> None:
        """Prepare for the next upstream call of a tool loop."""
        self.finish_reason = None
        self.step_calls = []
        self.step_mcp_calls = []
        self.step_approvals = []
        self.step_hosted_calls = []
        self.step_search_calls = []
        self._suppressed.clear()

    # -- MCP ---------------------------------------------------------------------
    def open_list_tools(self, server_label: str) -> tuple[dict[str, Any], list[Event]]:
        """An mcp_list_tools item, open while the server is asked for its tools."""
        item: dict[str, Any] = {
            "id": new_id("mcpl"),
            "type": "mcp_list_tools",
            "server_label": server_label,
            "tools": [],
            "error": None,
        }
        open_item, added = self._open_item(item)
        self._running[item["id"]] = open_item
        return item, [
            added,
            self._event("response.mcp_list_tools.in_progress", item_id=item["id"], output_index=open_item.output_index),
        ]

    def close_list_tools(
        self, item: dict[str, Any], tools: list[dict[str, Any]], error: str | None = None
    ) -> list[Event]:
        item["tools"] = tools
        item["error"] = error
        return self._close_running(item, "response.mcp_list_tools." + ("failed" if error else "completed"))

    def open_mcp_call(
        self, server_label: str, name: str, arguments: str, *, approval_request_id: str | None = None
    ) -> tuple[dict[str, Any], list[Event]]:
        """An mcp_call the gateway makes on its own (an approved request): streamed whole."""
        events = self._close_content_item()
        item: dict[str, Any] = {
            "id": new_id("mcp"),
            "type": "mcp_call",
            "status": "in_progress",
            "server_label": server_label,
            "name": name,
            "arguments": "",
            "output": None,
            "error": None,
            "approval_request_id": approval_request_id,
        }
        open_item, added = self._open_item(item)
        self._running[item["id"]] = open_item
        base = {"item_id": item["id"], "output_index": open_item.output_index}
        events += [added, self._event("response.mcp_call.in_progress", **base)]
        if arguments:
            events.append(self._event("response.mcp_call_arguments.delta", **base, delta=arguments))
        events.append(self._event("response.mcp_call_arguments.done", **base, arguments=arguments))
        item["arguments"] = arguments
        return item, events

    def finish_mcp_call(self, item: dict[str, Any], *, output: str | None, error: dict[str, Any] | None) -> list[Event]:
        """The call returned: completed with its output, or failed with its error."""
        item["output"] = output
        item["error"] = error
        item["status"] = "failed" if error else "completed"
        return self._close_running(item, f"response.mcp_call.{item['status']}")

    def withheld_reasoning(self, item_ids: list[str]) -> None:
        """A model call was not given these reasoning items (upstreams.withheld_reasoning)."""
        for item_id in item_ids:
            self._withheld[item_id] = None

    def finish_hosted_call(self, item: dict[str, Any], output: str | None) -> list[Event]:
        """A served hosted tool returned (`output`), or did not run (None: failed)."""
        self.hosted_outputs[item["id"]]["output"] = output if output is not None else "The tool did not run."
        if output is None:
            item["status"] = "failed"
            open_item = self._running.pop(item["id"])
            return [
                self._event("response.output_item.done", output_index=open_item.output_index, item=self._copy(item))
            ]
        item["status"] = "completed"
        if item["type"] == "file_search_call":
            results = file_search_results(output)
            for result in results or []:
                self._found_files.setdefault(result["filename"], result["file_id"])
            if results is not None and self.file_search_results:
                item["results"] = results
        if item["type"] == "web_search_call":  # a registry tool served it: one search request
            served = {"web_search": {"num_requests": 1}}
            self.passed["tool_usage"] = add_counts(self.passed.get("tool_usage") or {}, served)
        return self._close_running(item, f"response.{item['type']}.completed")

    def _close_running(self, item: dict[str, Any], event_type: str) -> list[Event]:
        """The MCP item's own end event, then output_item.done with its final state."""
        open_item = self._running.pop(item["id"])
        return [
            self._event(event_type, item_id=item["id"], output_index=open_item.output_index),
            self._event("response.output_item.done", output_index=open_item.output_index, item=self._copy(item)),
        ]

    def _relay_item(self, item: dict[str, Any]) -> list[Event]:
        """An upstream's hosted call, whole: its events as OpenAI streams them (added, the
        type's progress events, done), numbered here."""
        item.setdefault("id", new_id("ht"))
        output_index = len(self.output)
        self.output.append(item)
        base = {"item_id": item["id"], "output_index": output_index}
        events = [
            self._event("response.output_item.added", output_index=output_index, item=dict(item, status="in_progress"))
        ]
        stages = _HOSTED_PROGRESS.get(item["type"], ())
        if stages:
            events.append(self._event(f"response.{item['type']}.in_progress", **base))
            events.append(self._event(f"response.{item['type']}.{stages[0]}", **base))
            if item.get("status", "completed") == "completed":
                events.append(self._event(f"response.{item['type']}.completed", **base))
        events.append(self._event("response.output_item.done", output_index=output_index, item=self._copy(item)))
        return events

    def add_item(self, item: dict[str, Any]) -> list[Event]:
        """Append an item produced by the gateway itself (e.g. a tool's output, a compaction)."""
        # A compaction item has no status: it is emitted whole.
        added = dict(item) if item["type"] == "compaction" else dict(item, status="in_progress")
        output_index = len(self.output)
        self.output.append(item)
        return [
            self._event("response.output_item.added", output_index=output_index, item=added),
            self._event("response.output_item.done", output_index=output_index, item=self._copy(item)),
        ]

    def open_compaction(self) -> tuple[dict[str, Any], list[Event]]:
        """A compaction item whose summary is being written: added without its content, then
        `response.compaction.compacting` (OpenAI's progress event, which carries no summary);
        `close_compaction` gives the item its sealed content."""
        item: dict[str, Any] = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": ""}
        output_index = len(self.output)
        self.output.append(item)
        return item, [
            self._event("response.output_item.added", output_index=output_index, item=dict(item)),
            self._event("response.compaction.compacting", item_id=item["id"], output_index=output_index),
        ]

    def close_compaction(self, item: dict[str, Any], sealed: str) -> list[Event]:
        item["encrypted_content"] = sealed
        return [self._event("response.output_item.done", output_index=self.output.index(item), item=dict(item))]

    # -- terminal ----------------------------------------------------------------
    def finish(self, *, incomplete_reason: str | None = None) -> list[Event]:
        """Close what is open and emit exactly one terminal event."""
        events = self.end_step()
        reason = incomplete_reason or INCOMPLETE_REASONS.get(self.finish_reason or "")
        self.response["usage"] = self.usage.as_dict()
        self.response.update(self.passed)
        if self._withheld:
            self.response["input_transformations"] = [
                # The SDK's nearest reason: the upstream is not given reasoning it cannot take as its own.
                {"id": item_id, "type": "reasoning", "action": "removed", "reason": "model_mismatch"}
                for item_id in self._withheld
            ]
        if reason:
            self.response["status"] = "incomplete"
            self.response["incomplete_details"] = {"reason": reason}
            events.append(self._event("response.incomplete", response=self._snapshot()))
        else:
            self.response["status"] = "completed"
            self.response["completed_at"] = int(time.time())
            events.append(self._event("response.completed", response=self._snapshot()))
        return events

    def skip_mcp_calls(self, message: str) -> list[Event]:
        """Close every mcp_call still open without running it (the budget ran out)."""
        events: list[Event] = []
        for open_item in sorted(self._running.values(), key=lambda o: o.output_index):
            if open_item.item["type"] == "mcp_call":
                events += self.finish_mcp_call(
                    open_item.item,
                    output=None,
                    error={"type": "mcp_protocol_error", "code": -32000, "message": message},
                )
        return events

    def _abandon_open_items(self) -> None:
        for open_item in [self._content_item, *self._calls.values(), *self._running.values()]:
            if open_item is None:
                continue
            if open_item.part is not None:
                part = open_item.part
                final = self._empty_part(part.kind)
                final["refusal" if part.kind == "refusal" else "text"] = "".join(part.chunks)
                open_item.item["content"][part.index] = final
                open_item.part = None
            if open_item.item["type"] in ("function_call", "mcp_call", "mcp_approval_request") and open_item.arguments:
                open_item.item["arguments"] = "".join(open_item.arguments)
            if "status" in open_item.item:  # mcp_list_tools / approval requests have none
                open_item.item["status"] = "incomplete"
        self._content_item = None
        self._calls.clear()
        self._running.clear()
        self._pending.clear()

    def fail(self, error: GatewayError) -> list[Event]:
        """An `error` event, then `response.failed`; partial output is kept."""
        self._abandon_open_items()
        self.response["status"] = "failed"
        self.response["error"] = error.as_response_error()
        self.response["usage"] = self.usage.as_dict()
        payload = {"type": error.error_type, "code": error.code, "message": error.message, "param": error.param}
        # The superset of OpenAI's flat error event and Open Responses' nested one.
        return [
            self._event("error", code=error.code, message=error.message, param=error.param, error=payload),
            self._event("response.failed", response=self._snapshot()),
        ]

    def cancelled_event(self) -> Event:
        """Neither spec has a cancelled event: response.failed carries status `cancelled`."""
        return self._event("response.failed", response=self._snapshot())

    def cancel(self) -> None:
        """The client went away or cancelled: no events, partial output kept."""
        self._abandon_open_items()
        self.response["status"] = "cancelled"
        self.response["usage"] = self.usage.as_dict()


def file_search_results(output: str) -> list[dict[str, Any]] | None:
    """The results of a file_search the gateway ran (its output to the model is JSON: see
    orchestration/vector_stores.py), as a file_search_call item's `results`; None if not that."""
    try:
        parsed = json.loads(output)
    except ValueError:
        return None
    results = parsed.get("results") if isinstance(parsed, dict) else None
    if not isinstance(results, list):
        return None
    return [
        {
            "file_id": r.get("file_id"),
            "filename": r.get("filename"),
            "score": r.get("score"),
            "text": r.get("text"),
            "attributes": r.get("attributes") or {},
        }
        for r in results
        if isinstance(r, dict) and isinstance(r.get("file_id"), str) and isinstance(r.get("filename"), str)
    ]


def file_citations(text: str, files: dict[str, str]) -> list[dict[str, Any]]:
    """`file_citation` annotations of an answer: each file a search found whose filename the
    answer names, at the end of each mention (the tool asks the model to cite by filename)."""
    found = []
    for filename, file_id in files.items():
        start = text.find(filename)
        while start != -1:
            end = start + len(filename)
            found.append({"type": "file_citation", "file_id": file_id, "filename": filename, "index": end})
            start = text.find(filename, end)
    return sorted(found, key=lambda a: (a["index"], a["filename"]))


# The progress event between `.in_progress` and `.completed` of each hosted call type.
_HOSTED_PROGRESS = {
    "web_search_call": ("searching",),
    "file_search_call": ("searching",),
    "code_interpreter_call": ("interpreting",),
    "image_generation_call": ("generating",),
}


def reasoning_text(item: dict[str, Any]) -> str:
    """The text of a reasoning item: its reasoning_text content, else its summary."""
    text = "".join(p.get("text", "") for p in item.get("content") or [] if p.get("type") == "reasoning_text")
    return text or "".join(p.get("text", "") for p in item.get("summary") or [])


def output_from_events(events: list[Event]) -> list[dict[str, Any]]:
    """The output so far of a response, folded from its events (for polling a running response)."""
    fold = OutputFold()
    for event in events:
        fold.feed(event)
    return fold.output


class OutputFold:
    """`output_from_events`, one event at a time: a worker keeps the output so far of its run
    as it logs it (the running view a poll reads, store/eventlog.py), at a constant cost per
    event instead of folding the whole log again per poll."""

    __slots__ = ("output",)

    def __init__(self) -> None:
        self.output: list[dict[str, Any]] = []

    def feed(self, event: Event) -> None:
        output = self.output
        kind = event["type"]
        if kind == "response.output_item.added":
            output.append(copy_json(event["item"]))
        elif kind == "response.output_item.done":
            output[event["output_index"]] = copy_json(event["item"])
        elif kind == "response.content_part.added":
            output[event["output_index"]]["content"].append(copy_json(event["part"]))
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta"):
            output[event["output_index"]]["content"][event["content_index"]]["text"] += event["delta"]
        elif kind == "response.refusal.delta":
            output[event["output_index"]]["content"][event["content_index"]]["refusal"] += event["delta"]
        elif kind == "response.function_call_arguments.delta":
            output[event["output_index"]]["arguments"] += event["delta"]
        elif kind == "response.reasoning_summary_part.added":
            output[event["output_index"]]["summary"].append(copy_json(event["part"]))
        elif kind == "response.reasoning_summary_text.delta":
            output[event["output_index"]]["summary"][event["summary_index"]]["text"] += event["delta"]
