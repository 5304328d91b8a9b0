"""Helpers of the lane and steering tests: reading a socket that carries several responses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from websockets.sync.client import ClientConnection

from tests.support.stream_validator import validate_events

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def send(ws: ClientConnection, **message: Any) -> None:
    ws.send(json.dumps(message))


def read_until(
    ws: ClientConnection, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 30
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while not done(events):
        events.append(json.loads(ws.recv(timeout=timeout)))
    return events


def terminals(count: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: sum(e["type"] in TERMINAL for e in events) >= count


def seen(kind: str, count: int = 1) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: sum(e["type"] == kind for e in events) >= count


def of_lane(events: list[dict[str, Any]], stream_id: str | None) -> list[dict[str, Any]]:
    return [e for e in events if e.get("stream_id") == stream_id]


def responses(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each response's events checked by the strict validator (as HTTP streams them: without
    the WebSocket-only stream_id); their terminal Responses, in order."""
    finals, current = [], []
    for event in events:
        in_stream = event["type"].startswith("response.") or (event["type"] == "error" and "status" not in event)
        if not in_stream or event["type"].startswith("response.steer."):
            continue  # a steer's answer, or an error frame of a create that made no response
        current.append({k: v for k, v in event.items() if k != "stream_id"})
        if event["type"] in TERMINAL:
            finals.append(validate_events(current))
            current = []
    assert not current, f"a response did not end: {[e['type'] for e in current]}"
    return finals
