"""/v1/chat/completions and /v1/embeddings through the gateway, with the real `openai` SDK."""

from __future__ import annotations

import time

import openai
import pytest

from tests.support.errors import error_body
from tests.support.harness import MODEL, Gateway, make_key
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def usage_rows(tenant_id: int, wait: float = 5.0) -> list:
    from responses_api.models import UsageRecord

    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:  # recorded just after the answer
        rows = list(UsageRecord.objects.filter(tenant_id=tenant_id).order_by("id"))
        if rows:
            return rows
        time.sleep(0.05)
    return []


def test_chat_completions_pass_through_with_usage(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="Hello from upstream."))
    client = gateway.openai()
    completion = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Hello from upstream."
    sent = scripted.requests[-1]
    assert sent.path == "/v1/chat/completions" and sent.body["model"] == MODEL
    assert "sk-gw" not in str(sent.headers)  # the client's gateway key never reaches the upstream
    (row,) = usage_rows(gateway.tenant_id)
    assert (row.endpoint, row.model, row.status) == ("chat.completions", MODEL, 200)
    assert (row.input_tokens, row.output_tokens) == (completion.usage.prompt_tokens, completion.usage.completion_tokens)
    usage = gateway.http().get("/v1/usage", params={"group_by": "model"}).json()
    assert any(b["model"] == MODEL and b["requests"] >= 1 for b in usage["data"])


def test_streamed_chat_completions_are_relayed_chunk_by_chunk(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.enqueue(MODEL, Reply(text="one two three four five", chunk_chars=4, interval=0.05))
    client = gateway.openai()
    arrivals, text = [], ""
    for chunk in client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        stream_options={"include_usage": True},
    ):
        arrivals.append(time.monotonic())
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == "one two three four five"
    assert arrivals[-1] - arrivals[0] > 0.2  # not buffered into one piece
    (row,) = usage_rows(gateway.tenant_id)
    assert row.output_tokens and row.output_tokens > 0


def test_embeddings_pass_through(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    client = gateway.openai()
    result = client.embeddings.create(model=MODEL, input=["a cat", "a very small dog"])
    assert [len(d.embedding) for d in result.data] == [4, 4]
    (row,) = usage_rows(gateway.tenant_id)
    assert (row.endpoint, row.input_tokens, row.output_tokens) == ("embeddings", 6, 0)


def test_same_keys_allowlists_and_errors(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey

    limited, _ = make_key(tenant="acme", name="limited")
    ApiKey.objects.filter(name="limited").update(allowed_models=["other-model"])
    with pytest.raises(openai.NotFoundError):
        gateway.openai(limited).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.AuthenticationError):
        gateway.openai("sk-gw-wrong").embeddings.create(model=MODEL, input="x")
    missing = gateway.http().post("/v1/chat/completions", json={"messages": []})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"
    scripted.enqueue(
        MODEL, Reply(status=400, error_body={"error": {"message": "bad messages", "type": "invalid_request_error"}})
    )
    refused = gateway.http().post("/v1/chat/completions", json={"model": MODEL, "messages": "nope"})
    assert refused.status_code == 400 and "bad messages" in refused.json()["error"]["message"]
    assert gateway.http().get("/v1/nothing-here").status_code == 404


def test_embeddings_on_a_chat_only_model_say_what_to_use_instead(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """llama.cpp's own 501 advises its operator to restart it with --embeddings (which would
    stop its completions): the gateway's 400 says what the client's side does instead."""
    scripted.embeddings_error = (
        501,
        {
            "error": {
                "code": 501,
                "message": "This server does not support embeddings. Start it with `--embeddings`",
                "type": "not_supported_error",
            }
        },
    )
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.openai().embeddings.create(model=MODEL, input="the sea")
    error = error_body(caught.value)
    assert error["code"] == "model_not_supported" and error["param"] == "model"
    assert error["message"].startswith(f"The model '{MODEL}' serves no embeddings.")
    assert error["message"].endswith(
        "For embeddings, call a model routed to an embedding model (e.g. nomic-embed-text on Ollama, "
        "text-embedding-3-small on OpenAI): add it as a provider and model in GATEWAY_CONFIG "
        "(deploy/gateway.yaml) or in the admin."
    )


def test_a_timed_out_pass_through_names_its_provider_and_the_limit(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from responses_api.models import Provider
    from responses_api.orchestration import routing

    Provider.objects.update(timeout=0.5)
    routing.clear_cache()
    scripted.enqueue(MODEL, Reply(text="late", delay=5))
    with pytest.raises(openai.APIStatusError) as refused:
        gateway.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    error = error_body(refused.value)
    provider = Provider.objects.get()
    assert refused.value.status_code == 504 and error["code"] == "upstream_timeout"
    assert f"of provider '{provider.name}'" in error["message"] and "(timeout)" in error["message"]
