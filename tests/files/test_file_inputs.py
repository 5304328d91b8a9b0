"""`input_file` and `input_image` naming an uploaded file (`file_id`): each upstream dialect is
sent what it takes (a chat server the PDF's extracted text, Anthropic a document block, a native
Responses server the bytes as `file_data`; an image as image content everywhere), on every
transport; the stored items keep the `file_id`, not the bytes; an unknown or another tenant's
id is a 400 naming the part before any upstream call."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.files.conftest import error_param
from tests.files.documents import pdf, png
from tests.responses_api.test_anthropic import CLAUDE, anthropic  # noqa: F401 - the fixture
from tests.responses_api.test_background import poll
from tests.support.harness import MODEL, CeleryWorker, Gateway, make_key
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.test_websocket_mode import socket, turn

pytestmark = pytest.mark.embedded

SECRET = "The secret word is BANANA"


@pytest.fixture(autouse=True)
def answers(scripted: ScriptedUpstream) -> None:
    for model in (MODEL, "claude-up"):
        scripted.set_default(model, Reply(text="It says BANANA."))


def question(file_id: str, kind: str = "input_file") -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "What does the file say?"}, {"type": kind, "file_id": file_id}],
        }
    ]


@contextlib.contextmanager
def background_worker(files_root: Path) -> Iterator[None]:
    """A real Celery worker reading the test's files (embedded: the web process runs the work)."""
    from django.conf import settings

    if settings.EMBEDDED_WORKER:
        yield
        return
    worker = CeleryWorker(extra_env={"GATEWAY_FILES_ROOT": str(files_root)})
    try:
        worker.wait_ready()
        yield
    finally:
        worker.stop()


def chat_parts(scripted: ScriptedUpstream) -> Any:
    (call,) = [r for r in scripted.model_calls if r.path == "/v1/chat/completions"]
    return call.body["messages"][-1]["content"]


@pytest.mark.parametrize("transport", ["json", "sse", "background", "websocket"])
def test_a_pdf_reaches_a_chat_server_as_its_text_on_every_transport(
    gateway: Gateway, scripted: ScriptedUpstream, files_root: Path, transport: str
) -> None:
    client = gateway.openai()
    document = client.files.create(file=("secret.pdf", pdf(SECRET), "application/pdf"), purpose="user_data")
    inputs = question(document.id)
    if transport == "json":
        response_id = client.responses.create(model=MODEL, input=inputs).id
    elif transport == "sse":
        with client.responses.stream(model=MODEL, input=inputs) as stream:
            response_id = stream.get_final_response().id
    elif transport == "background":
        with background_worker(files_root):
            response_id = client.responses.create(model=MODEL, input=inputs, background=True).id
            assert poll(gateway, response_id)["status"] == "completed"
    else:
        with socket(gateway) as ws:
            events = turn(ws, model=MODEL, input=inputs)
        assert events[-1]["type"] == "response.completed", events[-1]
        response_id = events[-1]["response"]["id"]
    # Text parts only: the chat conversion joins them into one string.
    sent = chat_parts(scripted)
    assert sent.startswith("What does the file say?\n[file secret.pdf]\n") and SECRET in sent
    # What is stored is the reference, not the bytes or the text.
    stored = client.responses.input_items.list(response_id).data[0].model_dump()
    assert stored["content"][1]["type"] == "input_file" and stored["content"][1]["file_id"] == document.id
    assert SECRET not in json.dumps(stored)


def test_a_continued_chain_still_resolves_the_file(
    gateway: Gateway, scripted: ScriptedUpstream, files_root: Path
) -> None:
    client = gateway.openai()
    notes = client.files.create(file=("notes.txt", b"Remember: the meeting is at noon."), purpose="user_data")
    first = client.responses.create(model=MODEL, input=question(notes.id))
    client.responses.create(model=MODEL, previous_response_id=first.id, input="And again?")
    second = scripted.model_calls[-1].body["messages"]
    assert any("meeting is at noon" in json.dumps(m) for m in second)


def test_an_image_is_image_content_on_a_chat_server(
    gateway: Gateway, scripted: ScriptedUpstream, files_root: Path
) -> None:
    client = gateway.openai()
    image = client.files.create(file=("dot.png", png(), "image/png"), purpose="user_data")
    client.responses.create(model=MODEL, input=question(image.id, "input_image"))
    part = chat_parts(scripted)[1]
    assert part["type"] == "image_url"
    assert part["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(png()).decode()


def test_a_pdf_is_a_document_block_on_anthropic(
    anthropic: Gateway,  # noqa: F811 - the imported fixture
    scripted: ScriptedUpstream,
    files_root: Path,
) -> None:
    client = anthropic.openai()
    document = client.files.create(file=("secret.pdf", pdf(SECRET), "application/pdf"), purpose="user_data")
    image = client.files.create(file=("dot.png", png(), "image/png"), purpose="user_data")
    inputs = question(document.id)
    inputs[0]["content"].append({"type": "input_image", "file_id": image.id})
    client.responses.create(model=CLAUDE, input=inputs)
    (call,) = [r for r in scripted.requests if r.path == "/v1/messages"]
    blocks = call.body["messages"][-1]["content"]
    assert blocks[1] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(pdf(SECRET)).decode()},
    }
    assert blocks[2]["type"] == "image" and blocks[2]["source"]["media_type"] == "image/png"


def test_a_pdf_is_file_data_on_a_native_responses_server(
    gateway: Gateway, scripted: ScriptedUpstream, files_root: Path
) -> None:
    from responses_api.ops.config_sync import sync_config
    from responses_api.orchestration import routing

    sync_config(
        {
            "providers": [{"name": "native", "kind": "responses", "base_url": scripted.base_url}],
            "models": [{"name": "via-responses", "targets": [{"provider": "native", "model": MODEL}]}],
        }
    )
    routing.clear_cache()
    client = gateway.openai()
    document = client.files.create(file=("secret.pdf", pdf(SECRET), "application/pdf"), purpose="user_data")
    client.responses.create(model="via-responses", input=question(document.id))
    (call,) = [r for r in scripted.model_calls if r.path == "/v1/responses"]
    part = call.body["input"][-1]["content"][1]
    assert part == {
        "type": "input_file",
        "file_data": "data:application/pdf;base64," + base64.b64encode(pdf(SECRET)).decode(),
        "filename": "secret.pdf",
    }


def test_an_unknown_or_foreign_file_id_is_a_400_naming_the_part(
    gateway: Gateway, scripted: ScriptedUpstream, files_root: Path
) -> None:
    other_key, _ = make_key(tenant="globex")
    theirs = gateway.openai(key=other_key).files.create(file=("t.txt", b"theirs"), purpose="user_data")
    text = gateway.openai().files.create(file=("t.txt", b"mine"), purpose="user_data")
    client = gateway.openai()
    for file_id, kind in ((theirs.id, "input_file"), ("file-unknown", "input_file"), (text.id, "input_image")):
        for background in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                client.responses.create(model=MODEL, input=question(file_id, kind), background=background)
            assert error_param(refused.value) == "input[0].content[1].file_id"
    with socket(gateway) as ws:
        events = turn(ws, model=MODEL, input=question(theirs.id))
    assert events[-1]["type"] == "error" and events[-1]["error"]["param"] == "input[0].content[1].file_id"
    assert scripted.model_calls == []
    from responses_api.models import Response

    assert not Response.objects.exists()


def test_a_long_text_is_bounded(gateway: Gateway, scripted: ScriptedUpstream, files_root: Path, settings) -> None:
    settings.GATEWAY_FILES_MAX_TEXT_CHARS = 100
    client = gateway.openai()
    long = client.files.create(file=("long.txt", b"word " * 1000), purpose="user_data")
    client.responses.create(model=MODEL, input=question(long.id))
    text = chat_parts(scripted)
    assert "truncated" in text and len(text) < 300


def test_a_files_text_is_checked_by_the_input_guardrails(
    gateway: Gateway, scripted: ScriptedUpstream, files_root: Path
) -> None:
    """Text extracted from a stored file goes to the model like any input, so it passes the
    input guardrails: a block before any upstream call, a redact in what the model gets."""
    from responses_api.models import ApiKey
    from tests.responses_api.test_guardrails import events, guardrail

    fruit = {"categories": {"fruit": {"words": ["BANANA"]}}}
    redacting_key, _ = make_key(name="redacted")  # the same tenant's: it may read the file
    guardrail("fruit-out", "patterns", "redact", fruit, api_key=ApiKey.objects.get(name="redacted"))
    guardrail("no-fruit", "patterns", "block", fruit, api_key=ApiKey.objects.get(name="test"))
    client = gateway.openai()
    document = client.files.create(file=("secret.pdf", pdf(SECRET), "application/pdf"), purpose="user_data")
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input=question(document.id))
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "guardrail_blocked"
    assert "BANANA" not in raised.value.body["message"]
    assert scripted.model_calls == []
    gateway.openai(redacting_key).responses.create(model=MODEL, input=question(document.id))
    sent = json.dumps(chat_parts(scripted))
    assert "BANANA" not in sent and "[REDACTED:fruit]" in sent
    assert [(e["category"], e["action"]) for e in events()] == [("fruit", "block"), ("fruit", "redact")]


def test_a_redacted_pdf_goes_as_its_text_not_its_bytes() -> None:
    from responses_api.protocol.files import FileContent, resolve_file_parts

    redacted = FileContent("file-1", "a.pdf", "application/pdf", data=b"", text="[REDACTED:fruit]")
    items = [{"type": "message", **question("file-1")[0]}]
    (item,) = resolve_file_parts(items, {"file-1": redacted}, "document")
    assert item["content"][1] == {"type": "input_text", "text": "[file a.pdf]\n[REDACTED:fruit]"}
