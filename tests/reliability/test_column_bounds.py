"""Every bound the database has is checked at the door.

Each string column of the two apps is classified by who supplies its value. A column a client
fills has a probe: a request one character over the column's bound is a 400 naming the field,
before any upstream call and with nothing stored. A column added later without a class fails
`test_every_string_column_is_classified`, so it cannot reopen the 500 the bound used to be
(a 100-character item id, after the model was paid for).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from django.db import models

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import ScriptedUpstream

pytestmark = pytest.mark.embedded


def _length(app: str, model: str, field: str) -> int:
    return apps.get_model(app, model)._meta.get_field(field).max_length


def probe_item_ids(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    too_long = "msg_" + "a" * (_length("responses_api", "Item", "public_id") - 3)
    item = {"type": "message", "role": "user", "content": "x", "id": too_long}
    http = gateway.http()
    answers = [
        (http.post("/v1/responses", json={"model": MODEL, "input": [item]}), "input[0].id"),
        (http.post("/v1/conversations", json={"items": [item]}), "items[0].id"),
    ]
    conversation = http.post("/v1/conversations", json={}).json()["id"]
    answers.append((http.post(f"/v1/conversations/{conversation}/items", json={"items": [item]}), "items[0].id"))
    call = {"type": "function_call_output", "call_id": "c" * 256, "output": "x"}
    answers.append((http.post("/v1/responses", json={"model": MODEL, "input": [call]}), "input[0].call_id"))
    for answer, param in answers:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == param
    assert scripted.model_calls == []


def probe_model(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    too_long = "m" * (_length("responses_api", "Response", "model") + 1)
    answer = gateway.http().post("/v1/responses", json={"model": too_long, "input": "hi"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "model"
    assert scripted.model_calls == []


def _upload_refused(gateway: Gateway, param: str, **form: Any) -> None:
    from responses_api.models import StoredFile

    fields = {"purpose": "user_data", **{k: v for k, v in form.items() if k != "file"}}
    answer = gateway.http().post("/v1/files", data=fields, files={"file": form["file"]})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    assert not StoredFile.objects.exists()


def probe_file_purpose(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    too_long = "p" * (_length("responses_api", "StoredFile", "purpose") + 1)
    _upload_refused(gateway, "purpose", purpose=too_long, file=("a.txt", b"x", "text/plain"))


def probe_file_name(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    too_long = "n" * (_length("responses_api", "StoredFile", "filename") - 3) + ".txt"
    _upload_refused(gateway, "file", file=(too_long, b"x", "text/plain"))


def probe_file_content_type(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    too_long = "text/" + "x" * _length("responses_api", "StoredFile", "content_type")
    _upload_refused(gateway, "file", file=("a.txt", b"x", too_long))


def probe_vector_store(field: str) -> Callable[[Gateway, ScriptedUpstream], None]:
    def probe(gateway: Gateway, scripted: ScriptedUpstream) -> None:
        from responses_api.models import VectorStore

        too_long = "n" * (_length("responses_api", "VectorStore", field) + 1)
        http = gateway.http()
        answer = http.post("/v1/vector_stores", json={field: too_long})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == field
        assert not VectorStore.objects.exists()
        if field == "name":  # an update is checked the same way
            store = http.post("/v1/vector_stores", json={}).json()["id"]
            answer = http.post(f"/v1/vector_stores/{store}", json={field: too_long})
            assert answer.status_code == 400 and answer.json()["error"]["param"] == field

    return probe


def probe_continuation_id(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import Response

    too_long = "c" * (_length("responses_api", "Response", "continuation_id") + 1)
    body = {"model": MODEL, "input": "hi", "background": True, "background_options": {"continuation_id": too_long}}
    answer = gateway.http().post("/v1/responses", json=body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "background_options.continuation_id"
    assert scripted.model_calls == [] and not Response.objects.exists()


# Columns an API client fills, with the probe that proves the parser bounds them.
CLIENT: dict[tuple[str, str, str], Callable[[Gateway, ScriptedUpstream], None]] = {
    ("responses_api", "Item", "public_id"): probe_item_ids,
    ("responses_api", "Response", "model"): probe_model,
    ("responses_api", "Response", "continuation_id"): probe_continuation_id,
    # /v1/files: the purpose is one of two; the name and type of the file part are bounded.
    ("responses_api", "StoredFile", "purpose"): probe_file_purpose,
    ("responses_api", "StoredFile", "filename"): probe_file_name,
    ("responses_api", "StoredFile", "content_type"): probe_file_content_type,
    ("responses_api", "VectorStore", "name"): probe_vector_store("name"),
    ("responses_api", "VectorStore", "description"): probe_vector_store("description"),
}
# Columns filled by the operator (admin forms check max_length; the config file goes through
# the same fields) or by the gateway itself (ids it makes, states, names of what it routed to).
OPERATOR = {
    ("responses_api", "Tenant", "name"),
    ("responses_api", "Tenant", "budget_period"),
    ("responses_api", "ApiKey", "name"),
    ("responses_api", "ApiKey", "budget_period"),
    ("responses_api", "AlertWebhook", "name"),
    ("responses_api", "AlertWebhook", "url"),
    ("responses_api", "Provider", "name"),
    ("responses_api", "Provider", "kind"),
    ("responses_api", "Provider", "base_url"),
    ("responses_api", "Provider", "api_key_env"),
    ("responses_api", "ModelRoute", "name"),
    ("responses_api", "RouteTarget", "upstream_model"),
    ("tool_registry", "Tool", "name"),
    ("tool_registry", "Tool", "executor"),
    ("tool_registry", "Tool", "url"),
    ("tool_registry", "Tool", "signing_secret_env"),
    ("tool_registry", "Tool", "python_callable"),
    ("tool_registry", "EgressAllow", "entry"),
    ("tool_registry", "EgressAllow", "note"),
    ("tool_registry", "McpServer", "label"),
    ("tool_registry", "McpServer", "url"),
    ("tool_registry", "McpServer", "approval"),
    ("responses_api", "Prompt", "id"),  # set in the config file or made by the gateway (pmpt_...)
    ("responses_api", "Prompt", "name"),
    ("responses_api", "PromptVersion", "model"),
    ("responses_api", "Guardrail", "name"),
    ("responses_api", "Guardrail", "kind"),
    ("responses_api", "Guardrail", "action"),
    ("responses_api", "Guardrail", "applies_to"),
}
GATEWAY = {
    ("responses_api", "ApiKey", "prefix"),
    ("responses_api", "ApiKey", "secret_hash"),
    ("responses_api", "Conversation", "id"),
    ("responses_api", "Response", "id"),
    ("responses_api", "Response", "status"),
    ("responses_api", "Response", "upstream"),
    ("responses_api", "Response", "served_by"),
    ("responses_api", "WebProcess", "id"),
    ("responses_api", "WorkerProcess", "id"),
    ("responses_api", "AlertDelivery", "status"),
    ("responses_api", "MaintenanceRun", "name"),  # a periodic job's name, e.g. retention
    # The config file that manages an entry: the operator's path, written by config sync.
    ("responses_api", "AlertWebhook", "config_source"),
    ("responses_api", "ModelRoute", "config_source"),
    ("responses_api", "Provider", "config_source"),
    ("responses_api", "Tenant", "config_source"),
    ("tool_registry", "McpServer", "config_source"),
    ("tool_registry", "Tool", "config_source"),
    ("responses_api", "Prompt", "config_source"),
    ("responses_api", "Guardrail", "config_source"),
    # A prompt's id and version as the registry holds them: set only once the look-up found it
    # (a client's unknown or over-long `prompt.id` is a 404 before anything is stored).
    ("responses_api", "Response", "prompt_id"),
    ("responses_api", "Response", "prompt_version"),
    # An audit row: a guardrail's name and category (bounded where the operator defines them:
    # protocol/guardrails.py CATEGORY_MAX_LENGTH), its action, the endpoint, the response's id.
    ("responses_api", "GuardrailEvent", "guardrail_name"),
    ("responses_api", "GuardrailEvent", "category"),
    ("responses_api", "GuardrailEvent", "action"),
    ("responses_api", "GuardrailEvent", "where"),
    ("responses_api", "GuardrailEvent", "response_id"),
    ("responses_api", "Item", "type"),  # one of the parser's known types: test below
    ("responses_api", "Response", "completion_window"),  # soonest, 2h or 8h: the parser refuses others
    # An uploaded file's row: its id, the storage's name for it, its hash (made by the gateway);
    ("responses_api", "StoredFile", "id"),
    ("responses_api", "StoredFile", "storage_name"),
    ("responses_api", "StoredFile", "sha256"),
    # Vector stores: ids the gateway makes, a file's ingestion status, and the embeddings route
    # (the operator's GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL, a route name: ModelRoute.name's bound).
    ("responses_api", "VectorStore", "id"),
    ("responses_api", "VectorStore", "embedding_model"),
    ("responses_api", "VectorStoreFileBatch", "id"),
    ("responses_api", "VectorStoreFile", "status"),
    ("responses_api", "UsageRecord", "endpoint"),
    ("responses_api", "UsageRecord", "model"),  # a route's name: usage is recorded for routed calls only
    ("responses_api", "UsageRecord", "upstream"),
    ("tool_registry", "ToolCallRecord", "response_id"),
    ("tool_registry", "ToolCallRecord", "tool_name"),  # a registry tool's name
    ("tool_registry", "ToolCallRecord", "call_id"),  # the model's call id for a registry tool
}


def string_columns() -> set[tuple[str, str, str]]:
    found = set()
    for app in ("responses_api", "tool_registry"):
        for model in apps.get_app_config(app).get_models():
            for field in model._meta.get_fields():
                if isinstance(field, models.CharField) and field.max_length:
                    found.add((app, model.__name__, field.name))
    return found


def test_every_string_column_is_classified() -> None:
    classified = set(CLIENT) | OPERATOR | GATEWAY
    unclassified = string_columns() - classified
    assert not unclassified, (
        f"classify these columns in {__name__}: who fills them, and (for a client) a probe: {sorted(unclassified)}"
    )
    assert not classified - string_columns(), "a classified column is gone: drop it from the lists"


@pytest.mark.parametrize("column", sorted(CLIENT), ids=lambda c: ".".join(c))
def test_client_columns_are_bounded_by_the_request_parser(
    gateway: Gateway, scripted: ScriptedUpstream, column: tuple[str, str, str]
) -> None:
    from responses_api.models import Item, Response

    CLIENT[column](gateway, scripted)
    assert not Response.objects.exists() and not Item.objects.exists()


def test_every_item_type_the_parser_accepts_fits_its_column() -> None:
    from responses_api.protocol import items
    from responses_api.protocol.client_tools import HOSTED_ITEM_TYPES

    known = {
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "item_reference",
        "compaction",
        *items._MCP_ITEMS,
        *items.CLIENT_TOOL_ITEM_FIELDS,
        *HOSTED_ITEM_TYPES,
    }
    limit = _length("responses_api", "Item", "type")
    assert max(len(kind) for kind in known) <= limit


def test_an_item_id_of_100_characters_is_stored_not_a_500(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """The battery's case: on 75d8303 the model was called, then storing failed (varchar(80))."""
    from tests.support.upstream import Reply

    scripted.enqueue(MODEL, Reply(text="ok"))
    item_id = "msg_" + "a" * 100
    http = gateway.http()
    answer = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": [{"type": "message", "role": "user", "content": "x", "id": item_id}]},
    )
    assert answer.status_code == 200, answer.text
    listed = http.get(f"/v1/responses/{answer.json()['id']}/input_items").json()
    assert [item["id"] for item in listed["data"]] == [item_id]
    conversation = http.post(
        "/v1/conversations", json={"items": [{"type": "message", "role": "user", "content": "x", "id": item_id + "b"}]}
    )
    assert conversation.status_code == 200, conversation.text
