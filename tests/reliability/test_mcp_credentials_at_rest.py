"""A background run's MCP credentials are sealed in its stored job and gone once it ends."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.harness import MODEL, Gateway, McpServerProcess, call
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def stored_job(response_id: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:  # the column as stored, not through the model
        cursor.execute("SELECT job FROM responses_api_response WHERE id = %s", [response_id])
        value = cursor.fetchone()[0]
    return value if isinstance(value, str) else json.dumps(value)


def test_mcp_tokens_are_sealed_at_rest_and_dropped_when_the_run_ends(
    gateway: Gateway, scripted: ScriptedUpstream, mcp_server: McpServerProcess, worker
) -> None:
    scripted.enqueue(MODEL, Reply(tool_calls=[call("add", {"a": 3, "b": 4}, "c1")], delay=0.5), Reply(text="7"))
    tool = {
        "type": "mcp",
        "server_label": "shop",
        "server_url": mcp_server.url,
        "require_approval": "never",
        "headers": {"Authorization": f"Bearer {mcp_server.token}", "X-Team-Token": "team-token-5150"},
    }
    client = gateway.openai()
    started = client.responses.create(model=MODEL, input="3+4", tools=[tool], background=True)
    job = stored_job(started.id)
    assert mcp_server.token not in job and "team-token-5150" not in job
    assert '"mcp_credentials": "gwsealed1.' in job or '"mcp_credentials":"gwsealed1.' in job
    deadline = time.monotonic() + 30
    resp = started
    while resp.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        resp = client.responses.retrieve(started.id)
    assert resp.status == "completed", resp
    assert resp.output[1].output == "7"  # the worker opened the credentials and used them
    assert "mcp_credentials" not in stored_job(started.id)


def test_the_credentials_split_round_trips() -> None:
    from responses_api.protocol.mcp_tools import restore_mcp_credentials, split_mcp_credentials

    body = {
        "model": "m",
        "tools": [
            {"type": "function", "name": "f"},
            {"type": "mcp", "server_label": "a", "headers": {"k": "header-secret"}, "authorization": "auth-secret"},
            {"type": "mcp", "server_label": "b"},
        ],
    }
    stripped, credentials = split_mcp_credentials(body)
    assert "header-secret" not in json.dumps(stripped) and "auth-secret" not in json.dumps(stripped)
    assert credentials == {"1": {"headers": {"k": "header-secret"}, "authorization": "auth-secret"}}
    assert restore_mcp_credentials(stripped, credentials) == body
    assert split_mcp_credentials({"model": "m"}) == ({"model": "m"}, {})
