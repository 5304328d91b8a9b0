"""Stored responses made directly through the ORM: fast, and exactly the rows the gateway writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from responses_api.models import Item, Response, ResponseItem
from responses_api.protocol.ids import new_id

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def user(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": new_id("msg"),
        "status": "completed",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }


def system(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": new_id("msg"),
        "status": "completed",
        "role": "system",
        "content": [{"type": "input_text", "text": text}],
    }


def assistant(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": new_id("msg"),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def function_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": new_id("fc"),
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
    }


def function_output(call_id: str, output: Any) -> dict[str, Any]:
    return {
        "type": "function_call_output",
        "id": new_id("fco"),
        "status": "completed",
        "call_id": call_id,
        "output": output if isinstance(output, str) else json.dumps(output),
    }


def reasoning(summary: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": new_id("rs"), "summary": [{"type": "summary_text", "text": summary}]}


def mcp_call(
    server: str, name: str, arguments: dict[str, Any], output: str | None = None, error: str | None = None
) -> dict[str, Any]:
    return {
        "type": "mcp_call",
        "id": new_id("mcp"),
        "server_label": server,
        "name": name,
        "arguments": json.dumps(arguments),
        "output": output,
        "error": error,
        "status": "failed" if error else "completed",
    }


def make_response(
    tenant_id: int,
    *,
    input: list[dict[str, Any]] | None = None,
    output: list[dict[str, Any]] | None = None,
    model: str = "test-model",
    status: str = "completed",
    created_at: datetime | None = None,
    metadata: dict[str, str] | None = None,
    previous: Response | str | None = None,
    store: bool = True,
    deleted: bool = False,
    input_tokens: int | None = 10,
    output_tokens: int | None = 5,
    latency_ms: int | None = 420,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
    instructions: str | None = None,
    **columns: Any,  # other Response columns: api_key_id, cached_tokens, cache_write_tokens, ...
) -> Response:
    input = input if input is not None else [user("hello")]
    output = output if output is not None else [assistant("hi there")]
    created = created_at or T0
    previous_id = previous.id if isinstance(previous, Response) else previous
    params: dict[str, Any] = {"instructions": instructions, "metadata": metadata or {}, "store": store, "tools": []}
    row = Response.objects.create(
        id=new_id("resp"),
        tenant_id=tenant_id,
        previous_response_id=previous_id,
        status=status,
        model=model,
        upstream=f"scripted:{model}",
        instructions=instructions,
        params=params,
        metadata=metadata or {},
        error=error,
        incomplete_details=incomplete_details,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        store=store,
        created_at=created,
        completed_at=created + timedelta(seconds=1) if status != "in_progress" else None,
        latency_ms=latency_ms,
        deleted_at=created + timedelta(hours=1) if deleted else None,
        **columns,
    )
    items = [Item(tenant_id=tenant_id, public_id=i["id"], type=i["type"], data=i) for i in [*input, *output]]
    Item.objects.bulk_create(items)
    links = [
        ResponseItem(response_id=row.id, item_id=it.id, role=0, position=p) for p, it in enumerate(items[: len(input)])
    ]
    links += [
        ResponseItem(response_id=row.id, item_id=it.id, role=1, position=p) for p, it in enumerate(items[len(input) :])
    ]
    ResponseItem.objects.bulk_create(links)
    return row


def tool_loop_conversation(tenant_id: int, *, model: str = "test-model") -> list[Response]:
    """Three chained responses of a two-tool loop: the conversation the admin tests look at."""
    t = T0
    first = make_response(
        tenant_id,
        model=model,
        created_at=t,
        instructions="You are a travel assistant. Use the tools.",
        input=[user("What's the weather in Paris, and should I pack an umbrella?")],
        output=[
            reasoning("The user wants the weather; call get_weather for Paris first."),
            function_call("get_weather", {"city": "Paris", "unit": "celsius"}, "call_weather_1"),
        ],
        input_tokens=120,
        output_tokens=25,
        latency_ms=640,
    )
    second = make_response(
        tenant_id,
        model=model,
        created_at=t + timedelta(seconds=2),
        previous=first,
        input=[function_output("call_weather_1", {"city": "Paris", "temp_c": 14, "sky": "light rain"})],
        output=[function_call("get_forecast", {"city": "Paris", "days": 2}, "call_forecast_2")],
        input_tokens=180,
        output_tokens=22,
        latency_ms=510,
    )
    third = make_response(
        tenant_id,
        model=model,
        created_at=t + timedelta(seconds=4),
        previous=second,
        input=[function_output("call_forecast_2", {"tomorrow": "showers", "after": "sunny"})],
        output=[
            assistant("It's 14 °C with light rain in Paris, and showers are expected tomorrow: yes, pack an umbrella.")
        ],
        input_tokens=230,
        output_tokens=31,
        latency_ms=890,
    )
    return [first, second, third]
