"""The gateway in front of a real model: the bundled SmolLM2-135M on llama.cpp.

One local model process serves the whole session (`local_model_url` in tests/conftest.py); each test
routes a model to it through the ORM and talks to the gateway with the `openai` SDK and raw
HTTP. Assertions are about structure (status, items, usage, event grammar), never wording.

scripts/test installs the model and sets GATEWAY_REQUIRE_LOCAL_MODEL=1, so there a missing
model fails the run; elsewhere these tests are skipped with the install hint.
"""

from __future__ import annotations

import pytest

from responses_api.ops import local_model
from tests.support.errors import error_body
from tests.support.harness import Gateway
from tests.support.stream_validator import validate_sse

pytestmark = pytest.mark.embedded

REAL_MODEL = "real-smollm2"
MAX_TOKENS = 24  # enough for a few words; keeps each request well under a second


@pytest.fixture
def real(gateway: Gateway, local_model_url: str) -> Gateway:
    """The gateway fixture with the model REAL_MODEL routed to the local model."""
    from responses_api.models import ModelRoute, Provider, RouteTarget

    provider = Provider.objects.create(name="local-real", base_url=local_model_url, timeout=120)
    route = ModelRoute.objects.create(name=REAL_MODEL)
    RouteTarget.objects.create(route=route, provider=provider, upstream_model=local_model.LOCAL_MODEL_NAME)
    return gateway


def assert_real_answer(response: dict) -> str:
    """A finished response with one non-empty assistant message and token usage; returns its text."""
    assert response["object"] == "response"
    assert response["model"] == REAL_MODEL
    assert response["status"] in ("completed", "incomplete"), response
    if response["status"] == "incomplete":
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    messages = [item for item in response["output"] if item["type"] == "message"]
    assert len(messages) == 1, response["output"]
    assert messages[0]["role"] == "assistant"
    text = "".join(part["text"] for part in messages[0]["content"] if part["type"] == "output_text")
    assert text.strip(), response
    usage = response["usage"]
    assert usage["input_tokens"] > 0
    assert 0 < usage["output_tokens"] <= MAX_TOKENS
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    return text


def test_non_streaming(real: Gateway) -> None:
    client = real.openai()
    response = client.responses.create(
        model=REAL_MODEL,
        instructions="You are a helpful assistant. Answer briefly.",
        input="Name a colour.",
        max_output_tokens=MAX_TOKENS,
    )
    body = response.model_dump(mode="json")
    text = assert_real_answer(body)
    assert response.output_text == text
    # Stored: the same response comes back by id.
    fetched = client.responses.retrieve(response.id).model_dump(mode="json")
    assert fetched["output"] == body["output"] and fetched["status"] == body["status"]


def test_streaming_with_the_sdk(real: Gateway) -> None:
    client = real.openai()
    events = list(
        client.responses.create(
            model=REAL_MODEL, input="Say hello to the world.", max_output_tokens=MAX_TOKENS, stream=True
        )
    )
    types = [event.type for event in events]
    assert types[0] == "response.created"
    assert types[-1] in ("response.completed", "response.incomplete")
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas and "".join(deltas).strip()
    final = events[-1].response.model_dump(mode="json")
    assert "".join(deltas) == assert_real_answer(final)
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_streaming_raw_sse_is_strictly_valid(real: Gateway) -> None:
    body = {
        "model": REAL_MODEL,
        "input": "Write three words about the sea.",
        "max_output_tokens": MAX_TOKENS,
        "stream": True,
    }
    with real.http(timeout=60) as http, http.stream("POST", "/v1/responses", json=body) as r:
        raw = r.read()
    assert r.status_code == 200, raw
    assert r.headers["content-type"].startswith("text/event-stream")
    terminal = validate_sse(raw)
    assert_real_answer(terminal)
    with real.http() as http:
        stored = http.get(f"/v1/responses/{terminal['id']}").json()
    validate_sse(raw, final_response=stored)


def test_follow_up_with_previous_response_id(real: Gateway) -> None:
    """A second turn on the first one's stored context, streamed then not."""
    client = real.openai()
    # Not client.responses.stream(): its get_final_response() insists on response.completed,
    # and a 24-token answer may well end with response.incomplete.
    events = list(
        client.responses.create(
            model=REAL_MODEL, input="My name is Ada. Say hi.", max_output_tokens=MAX_TOKENS, stream=True
        )
    )
    first = events[-1].response
    assert_real_answer(first.model_dump(mode="json"))
    second = client.responses.create(
        model=REAL_MODEL,
        input="What is my name?",
        previous_response_id=first.id,
        max_output_tokens=MAX_TOKENS,
    )
    body = second.model_dump(mode="json")
    assert_real_answer(body)
    assert body["previous_response_id"] == first.id
    # The second call's input items are its own message; the chain supplies the rest.
    items = client.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in items][-1] == "message"


def test_embeddings_on_the_chat_model_are_a_clear_400(real: Gateway) -> None:
    """llama.cpp serves embeddings only when started with --embeddings, which then refuses
    completions: the bundled chat model has none, and the client is told so (not a 502)."""
    import openai

    with pytest.raises(openai.BadRequestError) as caught:
        real.openai().embeddings.create(model=REAL_MODEL, input="the sea")
    error = error_body(caught.value)
    assert error["code"] == "model_not_supported" and error["param"] == "model"
    assert f"The model '{REAL_MODEL}' serves no embeddings" in error["message"]
    assert "--embeddings" in error["message"]  # llama.cpp's own reason, quoted


def _sections(text: str, size: int, count: int) -> list[str]:
    step = len(text) // count
    return [text[i * step : i * step + size] for i in range(count)]


def test_the_estimate_is_within_15_percent_of_llama_cpps_count(real: Gateway) -> None:
    """Issue 51: the gateway's estimate (protocol/tokens.py) against SmolLM2's own count through its
    chat template, which the gateway gets from llama.cpp (/apply-template, then /tokenize) for
    POST /v1/responses/input_tokens: markdown prose, code, a conversation, plain instructions."""
    from pathlib import Path

    from responses_api.protocol.request import parse_create_request
    from responses_api.protocol.tokens import estimate_request

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    code = (root / "responses_api" / "engine" / "run.py").read_text()
    bodies: list[dict] = [{"input": section} for section in _sections(readme, 4000, 6)]
    bodies += [{"input": section, "instructions": "Review this code."} for section in _sections(code, 4000, 3)]
    turns = _sections(readme, 1200, 5)
    bodies.append(
        {"input": [{"role": "user" if n % 2 == 0 else "assistant", "content": t} for n, t in enumerate(turns)]}
    )
    ratios = []
    for body in bodies:
        body = {"model": REAL_MODEL, **body}
        answer = real.http(timeout=60).post("/v1/responses/input_tokens", json=body)
        assert answer.status_code == 200 and answer.headers["x-gateway-token-count"] == "exact", answer.text
        req = parse_create_request(body)
        ratios.append(estimate_request(list(req.input_items), req.instructions, []) / answer.json()["input_tokens"])
    assert all(0.85 <= r <= 1.15 for r in ratios), [round(r, 3) for r in ratios]
