"""Turn stored items and usage rows into plain view models for the admin templates.

Pure functions over dicts (no queries): the admin views select, these shape,
the templates only display.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from ..models import Response
from ..protocol.client_tool_types import CLIENT_TOOL_TYPES
from ..protocol.client_tools import output_as_text
from ..protocol.tool_search import listing
from ..store.selectors import usd_text as money

TERMINAL_BAD = {"failed", "cancelled", "incomplete"}


def pretty_json(value: Any) -> str:
    """Pretty JSON for display; a string holding JSON is decoded first."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def _part_text(part: Any) -> tuple[str, str]:
    """(kind, text) of a content part: text, refusal, image, file or other."""
    if isinstance(part, str):
        return "text", part
    if not isinstance(part, dict):
        return "other", pretty_json(part)
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
        return "text", part.get("text") or ""
    if kind == "refusal":
        return "refusal", part.get("refusal") or ""
    if kind == "input_image":
        url = part.get("image_url") or part.get("file_id") or ""
        return "image", url if not str(url).startswith("data:") else "inline image (data URL)"
    if kind == "input_file":
        return "file", part.get("filename") or part.get("file_url") or part.get("file_id") or "file"
    return "other", pretty_json(part)


@dataclass
class Block:
    """One rendered item of a conversation."""

    kind: str  # message | reasoning | tool_call | tool_output | mcp_call | other
    role: str = ""  # user | assistant | system | developer (messages)
    side: str = "left"  # where the bubble sits: user on the right
    parts: list[tuple[str, str]] = field(default_factory=list)
    title: str = ""
    call_id: str = ""
    arguments: str = ""
    output: str = ""
    error: str = ""
    status: str = ""
    item_id: str = ""
    raw: str = ""
    io: str = ""  # input | output: where the item sits in its response

    @property
    def failed(self) -> bool:
        return bool(self.error) or self.status in (Response.Status.FAILED, Response.Status.INCOMPLETE)


def item_block(item: dict[str, Any], io: str = "", tool_names: dict[str, str] | None = None) -> Block:
    kind = item.get("type")
    common: dict[str, Any] = {
        "item_id": item.get("id") or "",
        "status": item.get("status") or "",
        "io": io,
        "raw": pretty_json(item),
    }
    if kind == "message" or (kind is None and "role" in item):
        role = item.get("role") or "user"
        content = item.get("content")
        parts = [_part_text(content)] if isinstance(content, str) else [_part_text(p) for p in content or []]
        return Block(
            "message", role=role, side="right" if role == "user" else "left", parts=parts, title=role, **common
        )
    if kind == "reasoning":
        parts = [_part_text(p) for p in (item.get("summary") or [])]
        parts += [_part_text(p) for p in (item.get("content") or [])]
        if item.get("encrypted_content") and not parts:
            parts = [("other", "(encrypted reasoning)")]
        return Block("reasoning", title="Reasoning", parts=parts, **common)
    if kind == "function_call":
        return Block(
            "tool_call",
            title=item.get("name") or "function",
            call_id=item.get("call_id") or "",
            arguments=pretty_json(item.get("arguments") or ""),
            **common,
        )
    if kind == "function_call_output":
        call_id = item.get("call_id") or ""
        output = item.get("output")
        text = (
            pretty_json(output)
            if not isinstance(output, list)
            else "\n".join(t for _, t in (_part_text(p) for p in output))
        )
        return Block("tool_output", title=(tool_names or {}).get(call_id, ""), call_id=call_id, output=text, **common)
    if kind == "mcp_call":
        error = item.get("error")
        return Block(
            "mcp_call",
            title=f"{item.get('server_label') or 'mcp'} · {item.get('name') or ''}",
            call_id=item.get("approval_request_id") or "",
            arguments=pretty_json(item.get("arguments") or ""),
            output=pretty_json(item["output"]) if item.get("output") is not None else "",
            error=pretty_json(error) if error else "",
            **common,
        )
    if kind == "tool_search_call":
        return Block(
            "tool_call",
            title="tool_search",
            call_id=item.get("call_id") or "",
            arguments=pretty_json(item.get("arguments") or {}),
            **common,
        )
    if kind == "tool_search_output":
        return Block(
            "tool_output",
            title="tool_search",
            call_id=item.get("call_id") or "",
            output=listing(item.get("tools")),
            **common,
        )
    client_tool = CLIENT_TOOL_TYPES.of_call(kind) if isinstance(kind, str) else None
    if client_tool is not None or kind in ("web_search_call", "file_search_call"):
        # A client tool's call (custom, shell, apply_patch, ...: the field its type shows) or a
        # served hosted tool's.
        shown = (client_tool.shown,) if client_tool is not None else ("input", "action", "operation", "queries")
        detail = next((item[k] for k in shown if k in item), "")
        name = item.get("name") or str(kind).removesuffix("_call")
        if item.get("namespace"):
            name = f"{item['namespace']} · {name}"
        return Block(
            "tool_call",
            title=name,
            call_id=item.get("call_id") or "",
            arguments=detail if isinstance(detail, str) else pretty_json(detail),
            **common,
        )
    if isinstance(kind, str) and CLIENT_TOOL_TYPES.of_output(kind) is not None:
        call_id = item.get("call_id") or ""
        return Block(
            "tool_output",
            title=(tool_names or {}).get(call_id, ""),
            call_id=call_id,
            output=output_as_text(item),
            **common,
        )
    return Block("other", title=str(kind or "item"), **common)


@dataclass
class Turn:
    """One response of a chain and its items."""

    response: Any  # a Response row
    blocks: list[Block]
    is_head: bool = False
    change_url: str = ""
    conversation_url: str = ""
    instructions: str | None = None  # the client's (protocol.compaction.client_instructions)
    gateway_prompt: bool = False  # the gateway appended its summariser prompt (/compact)
    prompt_url: str = ""  # the reusable prompt's admin page (its id and version: the response row's)
    guardrail_events: list[Any] = field(default_factory=list)  # GuardrailEvent rows of this response

    @property
    def status_bad(self) -> bool:
        return self.response.status in TERMINAL_BAD


def conversation_turns(responses: list[Any], entries: Iterable[Any], head_id: str) -> list[Turn]:
    """Group thread entries by response (chain order), with tool names resolved by call id."""
    entries = list(entries)
    tool_names = {
        e.item.get("call_id"): e.item.get("name")
        for e in entries
        if e.item.get("type") == "function_call" and e.item.get("call_id")
    }
    by_response: dict[str, list[Block]] = {r.id: [] for r in responses}
    for entry in entries:
        by_response.setdefault(entry.response_id, []).append(item_block(entry.item, entry.role_name, tool_names))
    return [Turn(r, by_response.get(r.id, []), r.id == head_id) for r in responses]


# --------------------------------------------------------------------------- usage chart


USAGE_COLUMNS = ("requests", "input_tokens", "output_tokens", "total_tokens", "cached_tokens", "cache_write_tokens")


def _display(agg: dict[str, Any]) -> dict[str, str]:
    shown = {k: f"{agg[k]:,}" for k in USAGE_COLUMNS}
    shown["cost"] = money(agg["cost_usd"])
    return shown


def _add_up(rows: list[dict[str, Any]], by: str) -> list[tuple[Any, dict[str, Any]]]:
    """Buckets added up per `by` (their costs to the micro-dollar, as /v1/usage's total)."""
    acc: dict[Any, dict[str, Any]] = {}
    for r in rows:
        agg = acc.setdefault(r.get(by), {**dict.fromkeys(USAGE_COLUMNS, 0), "cost": Decimal(0)})
        for k in USAGE_COLUMNS:
            agg[k] += r[k]
        agg["cost"] += Decimal(str(r["cost_usd"]))
    for agg in acc.values():
        agg["cost_usd"] = float(agg.pop("cost"))
    return sorted(acc.items(), key=lambda kv: (-kv[1]["cost_usd"], -kv[1]["total_tokens"]))


def usage_by_model(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    """Per-model totals, costliest (then largest) first, numbers formatted for display."""
    return [(m, _display(agg)) for m, agg in _add_up(rows, "model")]


# Calls that name no key: their key was deleted since (SET_NULL), or none made them.
NO_KEY = "(no key)"


def usage_by_key(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    """Per-key totals (buckets grouped by key), costliest first."""
    names = {r.get("key_id"): r.get("key") for r in rows}
    return [(names[k] or NO_KEY, _display(agg)) for k, agg in _add_up(rows, "key_id")]


def usage_totals(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The period's totals (one group: no row has the key `period`)."""
    added = _add_up(rows, "period")
    return _display(added[0][1] if added else {**dict.fromkeys(USAGE_COLUMNS, 0), "cost_usd": 0.0})


PALETTE = ["#417690", "#e07b39", "#5b9e5b", "#a05195", "#d45087", "#2f4b7c", "#ffa600", "#7a7a7a"]


def _nice_ceiling(value: int) -> int:
    if value <= 0:
        return 1
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return int(step * magnitude)
    return int(10 * magnitude)


def human(n: int) -> str:
    for unit, size in (("B", 1_000_000_000), ("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            return f"{n / size:.1f}".rstrip("0").rstrip(".") + unit
    return str(n)


@dataclass
class Chart:
    width: int
    height: int
    bars: list[dict[str, Any]]
    y_ticks: list[dict[str, Any]]
    x_labels: list[dict[str, Any]]
    legend: list[dict[str, Any]]
    plot: dict[str, int]
    empty: bool

    @property
    def mid_x(self) -> int:
        return self.plot["left"] + self.plot["width"] // 2

    @property
    def mid_y(self) -> int:
        return self.plot["top"] + self.plot["height"] // 2


def usage_chart(
    rows: list[dict[str, Any]],
    start: date,
    end: date,
    width: int = 960,
    height: int = 320,
    metric: str = "total_tokens",
) -> Chart:
    """A stacked bar chart (total tokens, or `metric="cost_usd"` cost, per day, one colour per
    model), as SVG geometry."""
    cost = metric == "cost_usd"
    # Cost is charted in micro-dollars (integers, as the token axis), labelled in dollars.
    rows = [{**r, "_v": round(r["cost_usd"] * 1_000_000) if cost else r["total_tokens"]} for r in rows]
    metric = "_v"
    days = [start + timedelta(days=i) for i in range((end - start).days + 1)]
    models = sorted({r["model"] for r in rows}, key=lambda m: -sum(r[metric] for r in rows if r["model"] == m))
    colour = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(models)}
    totals: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        totals.setdefault(r["day"], {})[r["model"]] = r
    day_total = {d.isoformat(): sum(v[metric] for v in totals.get(d.isoformat(), {}).values()) for d in days}
    top = _nice_ceiling(max(day_total.values(), default=0))
    left, right, top_pad, bottom = 64, 16, 16, 40
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    slot = plot_w / max(len(days), 1)
    bar_w = max(slot * 0.72, 1.0)
    bars = []
    for i, d in enumerate(days):
        key = d.isoformat()
        y = top_pad + plot_h
        for m in models:
            cell = totals.get(key, {}).get(m)
            if not cell or not cell[metric]:
                continue
            h = cell[metric] / top * plot_h
            y -= h
            bars.append(
                {
                    "x": round(left + i * slot + (slot - bar_w) / 2, 2),
                    "y": round(y, 2),
                    "w": round(bar_w, 2),
                    "h": round(max(h, 0.5), 2),
                    "colour": colour[m],
                    "title": f"{key} · {m}: {money(cell['cost_usd'])}, {cell['total_tokens']:,} tokens "
                    f"({cell['input_tokens']:,} in, {cell['output_tokens']:,} out) "
                    f"in {cell['requests']:,} requests",
                }
            )
    y_ticks = [
        {
            "y": round(top_pad + plot_h - plot_h * k / 4, 2),
            "label": money(top * k / 4 / 1_000_000) if cost else human(int(top * k / 4)),
        }
        for k in range(5)
    ]
    every = max(1, round(len(days) / 10))
    x_labels = [
        {"x": round(left + i * slot + slot / 2, 2), "label": d.strftime("%b %d")}
        for i, d in enumerate(days)
        if i % every == 0
    ]
    legend = []
    for m in models:
        total = sum(r[metric] for r in rows if r["model"] == m)
        shown = money(total / 1_000_000) if cost else human(total)
        legend.append({"model": m, "colour": colour[m], "total": total, "total_display": shown})
    return Chart(
        width,
        height,
        bars,
        y_ticks,
        x_labels,
        legend,
        {
            "left": left,
            "top": top_pad,
            "width": int(plot_w),
            "height": int(plot_h),
            "bottom": top_pad + int(plot_h),
            "right": left + int(plot_w),
        },
        empty=not rows,
    )
