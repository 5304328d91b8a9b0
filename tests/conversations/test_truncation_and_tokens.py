"""truncation: "auto" against a route's context window, and POST /v1/responses/input_tokens."""

from __future__ import annotations

import pytest

from responses_api.protocol.tokens import estimate_item, truncate
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


def message(role: str, text: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "id": f"msg_{text[:8]}", "role": role, "content": [{"type": kind, "text": text}]}


def call(call_id: str) -> list[dict]:
    return [
        {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "id": f"fo_{call_id}", "call_id": call_id, "output": "x" * 400},
    ]


def test_truncate_drops_oldest_whole_turns_and_keeps_instructions() -> None:
    items = [
        message("system", "be brief"),
        message("user", "a" * 400),
        *call("c1"),
        message("user", "b" * 400),
        message("user", "newest question"),
    ]
    size = sum(estimate_item(i) for i in items)
    oldest = estimate_item(items[1])
    truncated = truncate(items, budget=size - oldest, instructions=None, tools=[])
    assert truncated is not None
    kept, dropped = truncated
    assert kept[0]["role"] == "system" and dropped == 1 and items[1] not in kept  # only the oldest user message
    truncated = truncate(items, budget=size - oldest - 1, instructions=None, tools=[])
    assert truncated is not None
    kept, dropped = truncated
    assert dropped == 3
    types = [i["type"] for i in kept]
    assert "function_call" not in types and "function_call_output" not in types  # the call went with its output
    assert kept[0]["role"] == "system" and kept[-1] is items[-1]
    assert truncate(items, budget=10, instructions=None, tools=[]) is None  # not even the newest fits
    assert truncate(items, budget=10**6, instructions=None, tools=[]) == (items, 0)


@pytest.fixture
def small_window(gateway: Gateway) -> None:
    from responses_api.models import ModelRoute
    from responses_api.orchestration.routing import clear_cache as clear_route_cache

    ModelRoute.objects.filter(name=MODEL).update(context_window=700)
    clear_route_cache()


def test_a_long_conversation_keeps_answering_past_the_window(
    gateway: Gateway, scripted: ScriptedUpstream, small_window
) -> None:
    client = gateway.openai()
    conv = client.conversations.create()
    scripted.set_default(MODEL, Reply(text="ok " * 20))
    for turn in range(12):
        resp = client.responses.with_raw_response.create(
            model=MODEL,
            input=f"turn {turn}: " + "words " * 30,
            conversation=conv.id,
            truncation="auto",
            max_output_tokens=100,
        )
        assert resp.http_response.status_code == 200
    sent = scripted.requests[-1].body["messages"]
    assert sent[-1]["content"].startswith("turn 11:")  # the newest turn went through
    assert not any(m["content"].startswith("turn 0:") for m in sent if m["role"] == "user")  # the oldest did not
    assert int(resp.http_response.headers["x-gateway-truncated-items"]) > 0
    assert len(client.conversations.items.list(conv.id, limit=100).data) == 24  # the conversation keeps all


def test_without_auto_an_over_long_context_is_a_400_before_the_upstream(
    gateway: Gateway, scripted: ScriptedUpstream, small_window
) -> None:
    before = len(scripted.requests)
    resp = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "long " * 2000})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input")
    assert len([r for r in scripted.requests[before:] if r.path == "/v1/chat/completions"]) == 0


def test_the_window_is_learned_from_the_upstream(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.orchestration.routing import clear_cache as clear_route_cache
    from responses_api.upstreams import tokenize

    scripted.set_default(MODEL, Reply(text="never sent"))  # listed by the upstream's /v1/models
    scripted.model_info[MODEL] = {"max_model_len": 600}
    tokenize._windows.clear()
    clear_route_cache()
    try:
        resp = gateway.http().post("/v1/responses", json={"model": MODEL, "input": "long " * 2000})
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "context_length_exceeded"
    finally:
        scripted.model_info.clear()
        tokenize._windows.clear()


def test_input_tokens_estimate_and_exact(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.upstreams import tokenize

    client = gateway.openai()
    body = {"model": MODEL, "input": "How many tokens is this question?", "instructions": "Answer briefly."}
    estimated = gateway.http().post("/v1/responses/input_tokens", json=body)
    assert estimated.status_code == 200 and estimated.headers["x-gateway-token-count"] == "estimate"
    assert estimated.json()["object"] == "response.input_tokens" and estimated.json()["input_tokens"] > 5
    scripted.tokenizer = True
    tokenize._no_tokenizer.clear()
    try:
        exact = client.responses.input_tokens.count(**body)
        raw = gateway.http().post("/v1/responses/input_tokens", json=body)
    finally:
        scripted.tokenizer = False
        tokenize._no_tokenizer.clear()
    assert raw.headers["x-gateway-token-count"] == "exact"
    tokenized = [r for r in scripted.requests if r.path == "/tokenize"][-1].body
    assert [m["content"] for m in tokenized["messages"]] == ["Answer briefly.", "How many tokens is this question?"]
    assert (
        exact.input_tokens
        == raw.json()["input_tokens"]
        == (len('"Answer briefly."') + len('"How many tokens is this question?"')) // 3 + 6
    )
    # With a chain or a conversation, the stored context counts too.
    scripted.enqueue(MODEL, Reply(text="An answer of some length."))
    first = client.responses.create(model=MODEL, input="First question.")
    chained = (
        gateway.http()
        .post("/v1/responses/input_tokens", json={"model": MODEL, "input": "Second.", "previous_response_id": first.id})
        .json()["input_tokens"]
    )
    alone = (
        gateway.http()
        .post("/v1/responses/input_tokens", json={"model": MODEL, "input": "Second."})
        .json()["input_tokens"]
    )
    assert chained > alone
    missing = gateway.http().post("/v1/responses/input_tokens", json={"input": "x"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"


def test_input_tokens_never_reads_another_tenants_context(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from tests.support.harness import make_key

    scripted.enqueue(MODEL, Reply(text="private answer"))
    mine = gateway.openai().responses.create(model=MODEL, input="private question")
    conv = gateway.http().post("/v1/conversations", json={}).json()["id"]
    other_key, _ = make_key(tenant="other-co", name="other")
    other = gateway.http(other_key)
    chained = other.post(
        "/v1/responses/input_tokens", json={"model": MODEL, "input": "x", "previous_response_id": mine.id}
    )
    assert chained.status_code == 400 and chained.json()["error"]["code"] == "previous_response_not_found"
    in_conv = other.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "x", "conversation": conv})
    assert in_conv.status_code == 404 and in_conv.json()["error"]["param"] == "conversation"


def test_a_background_run_fits_the_learned_window_as_a_foreground_run_does(
    gateway: Gateway, scripted: ScriptedUpstream, worker
) -> None:
    """The worker's run learns the route's context window from the upstream as the web run does:
    the same request with truncation "auto" sends the model the same (truncated) messages."""
    from responses_api.orchestration.routing import clear_cache as clear_route_cache
    from responses_api.upstreams import tokenize
    from tests.responses_api.test_background import poll

    scripted.set_default(MODEL, Reply(text="ok"))
    scripted.model_info[MODEL] = {"max_model_len": 450}  # the 8 turns are ~460 estimated tokens
    tokenize._windows.clear()
    clear_route_cache()
    body = {
        "model": MODEL,
        "input": [message("user", f"turn {turn}: " + "words " * 40) for turn in range(8)],
        "truncation": "auto",
        "max_output_tokens": 100,
    }
    sent: dict[str, list] = {}
    try:
        for mode in ("foreground", "background"):
            before = len(scripted.requests)
            created = gateway.http().post("/v1/responses", json=body | {"background": mode == "background"})
            assert created.status_code == 200, created.text
            final = poll(gateway, created.json()["id"])
            assert final["status"] == "completed", final
            chats = [r for r in scripted.requests[before:] if r.path == "/v1/chat/completions"]
            sent[mode] = [m["content"] for m in chats[-1].body["messages"]]
    finally:
        scripted.model_info.clear()
        tokenize._windows.clear()
    assert sent["foreground"][-1].startswith("turn 7:")
    assert not any(text.startswith("turn 0:") for text in sent["foreground"])  # the window applied
    assert sent["background"] == sent["foreground"]


def _big_tools(count: int = 6) -> list[dict]:
    """Function tools whose schemas alone are ~1,500 estimated tokens (as Codex's are ~4,500)."""
    return [
        {
            "type": "function",
            "name": f"tool_{n}",
            "description": "does a thing " * 40,
            "parameters": {"type": "object", "properties": {f"p{k}": {"type": "string"} for k in range(40)}},
        }
        for n in range(count)
    ]


def test_a_context_the_estimate_overshoots_is_counted_by_llama_cpp_and_sent(
    gateway: Gateway, scripted: ScriptedUpstream, small_window
) -> None:
    """Issue 51: the estimate counts tool schemas that a template like SmolLM2's drops; llama.cpp
    counts what the model sees (/apply-template, then /tokenize), so the request is sent. The
    count is remembered: the same context again costs no tokenizer round trip."""
    from responses_api.protocol.tokens import estimate_request

    tools = _big_tools()
    body = {"model": MODEL, "input": "A short question about the sea?", "tools": tools, "max_output_tokens": 50}
    assert estimate_request([], None, [{k: t[k] for k in ("name", "parameters")} for t in tools]) > 700
    scripted.tokenizer = "llama.cpp"
    scripted.set_default(MODEL, Reply(text="An answer."))
    for _ in range(2):
        resp = gateway.http().post("/v1/responses", json=body)
        assert resp.status_code == 200, resp.text
    paths = [r.path for r in scripted.requests]
    assert paths.count("/v1/chat/completions") == 2
    assert paths.count("/apply-template") == 1  # the second create's context was counted already
    assert "tools" in [r for r in scripted.requests if r.path == "/apply-template"][0].body
    # Past the window by the upstream's count too: a 400 that says so, and no model call.
    resp = gateway.http().post("/v1/responses", json={**body, "input": "long " * 3000})
    error = resp.json()["error"]
    assert resp.status_code == 400 and error["code"] == "context_length_exceeded"
    assert "by the model's tokenizer" in error["message"]
    assert [r.path for r in scripted.requests].count("/v1/chat/completions") == 2


def test_input_tokens_are_exact_on_llama_cpp(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    scripted.tokenizer = "llama.cpp"
    body = {"model": MODEL, "input": "How many tokens is this question?", "instructions": "Answer briefly."}
    raw = gateway.http().post("/v1/responses/input_tokens", json=body)
    assert raw.status_code == 200 and raw.headers["x-gateway-token-count"] == "exact"
    prompt = (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nHow many tokens is this question?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert raw.json()["input_tokens"] == len(prompt) // 4
    tokenized = [r.body for r in scripted.requests if r.path == "/tokenize"]
    assert tokenized[-1] == {"content": prompt, "add_special": True}
