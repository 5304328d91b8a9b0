"""The hosted `file_search` tool over a chat upstream: the gateway searches its own vector
stores in the tool loop (file_search_call items and events, results under include, file
citations on the answer), with the real `openai` SDK, streamed and not."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import parse_sse, validate_sse
from tests.support.upstream import Reply, ScriptedUpstream
from tests.vector_stores.conftest import save, wait_files
from tests.vector_stores.test_vector_stores import DOGS, GARDEN, TAXES

pytestmark = pytest.mark.embedded


def _call(query: str, call_id: str = "c1") -> dict:
    return {"id": call_id, "name": "file_search", "arguments": json.dumps({"query": query})}


@pytest.fixture
def kb(gateway: Gateway, worker, embeddings_route) -> tuple[str, dict[str, str]]:
    client = gateway.openai()
    ids = {
        name: save(gateway.tenant_id, f"{name}.txt", text)
        for name, text in (("dogs", DOGS), ("taxes", TAXES), ("garden", GARDEN))
    }
    store = client.vector_stores.create(name="kb", file_ids=list(ids.values()))
    wait_files(client, store.id)
    return store.id, ids


def test_file_search_streams_its_call_and_cites_the_file(
    gateway: Gateway, scripted: ScriptedUpstream, kb: tuple[str, dict[str, str]]
) -> None:
    store_id, ids = kb
    scripted.enqueue(
        MODEL,
        Reply(tool_calls=[_call("dog walks")]),
        Reply(text="Walk your dog every day (dogs.txt)."),
    )
    with gateway.http() as http:
        raw = http.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": "How often should I walk my dog?",
                "stream": True,
                "tools": [{"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 2}],
                "include": ["file_search_call.results"],
            },
        )
    assert "x-gateway-dropped-tools" not in raw.headers
    terminal = validate_sse(raw.text)
    search, message = terminal["output"]
    assert search["type"] == "file_search_call" and search["status"] == "completed"
    assert search["queries"] == ["dog walks"]
    assert search["results"][0]["file_id"] == ids["dogs"] and len(search["results"]) <= 2
    assert DOGS in search["results"][0]["text"]
    part = message["content"][0]
    assert part["text"] == "Walk your dog every day (dogs.txt)."
    assert part["annotations"] == [
        {"type": "file_citation", "file_id": ids["dogs"], "filename": "dogs.txt", "index": part["text"].index(")")}
    ]
    kinds = [e["type"] for e in parse_sse(raw.text)]
    stages = ["in_progress", "searching", "completed"]
    positions = [kinds.index(f"response.file_search_call.{s}") for s in stages]
    assert positions == sorted(positions)
    # The model saw a function with a query, and the results as the tool's output.
    offered = [t["function"]["name"] for t in scripted.model_calls[0].body["tools"]]
    assert offered == ["file_search"]
    tool_message = scripted.model_calls[-1].body["messages"][-1]
    assert tool_message["role"] == "tool" and "Dogs are loyal" in tool_message["content"]
    assert terminal["tools"][0]["type"] == "file_search"


def test_file_search_with_the_sdk_without_include_and_with_filters(
    gateway: Gateway, scripted: ScriptedUpstream, kb: tuple[str, dict[str, str]]
) -> None:
    store_id, ids = kb
    scripted.enqueue(MODEL, Reply(tool_calls=[_call("tax dog garden")]), Reply(text="See taxes.txt."))
    client = gateway.openai()
    response = client.responses.create(
        model=MODEL,
        input="What is due in April?",
        tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
    )
    search = response.output[0]
    assert search.type == "file_search_call" and search.results is None  # not included unless asked
    assert response.output_text == "See taxes.txt."
    annotations = response.output[1].content[0].annotations
    assert [(a.type, a.file_id) for a in annotations] == [("file_citation", ids["taxes"])]

    # A filter on an attribute no file has, another tenant's store, an unknown one: 4xx before any model call.
    calls = len(scripted.model_calls)
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(
            model=MODEL,
            input="x",
            tools=[
                {
                    "type": "file_search",
                    "vector_store_ids": [store_id],
                    "filters": {"type": "eq", "key": "nope", "value": 1},
                }
            ],
        )
    assert bad.value.body["param"] == "tools[0].filters.key"  # type: ignore[index]
    other_key, _ = make_key(tenant="other")
    with pytest.raises(openai.NotFoundError) as missing:
        gateway.openai(other_key).responses.create(
            model=MODEL, input="x", tools=[{"type": "file_search", "vector_store_ids": [store_id]}]
        )
    assert missing.value.body["param"] == "tools[0].vector_store_ids[0]"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as empty:
        client.responses.create(model=MODEL, input="x", tools=[{"type": "file_search", "vector_store_ids": []}])
    assert empty.value.body["param"] == "tools[0].vector_store_ids"  # type: ignore[index]
    assert len(scripted.model_calls) == calls


def test_file_search_in_a_background_run(
    gateway: Gateway, scripted: ScriptedUpstream, kb: tuple[str, dict[str, str]]
) -> None:
    store_id, ids = kb
    scripted.enqueue(MODEL, Reply(tool_calls=[_call("tomatoes sun")]), Reply(text="Full sun, says garden.txt."))
    client = gateway.openai()
    started = client.responses.create(
        model=MODEL,
        input="Where do tomatoes grow?",
        background=True,
        tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
        include=["file_search_call.results"],
    )
    import time

    deadline = time.monotonic() + 30
    response = started
    while response.status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
        response = client.responses.retrieve(started.id)
    assert response.status == "completed", response
    search = response.output[0]
    assert search.type == "file_search_call" and search.results and search.results[0].file_id == ids["garden"]
    assert response.output[1].content[0].annotations[0].file_id == ids["garden"]


@pytest.mark.parametrize("kind", ["anthropic", "responses"])
def test_file_search_on_anthropic_and_native_responses_routes(
    gateway: Gateway, scripted: ScriptedUpstream, kb: tuple[str, dict[str, str]], kind: str
) -> None:
    """Not passed on to a native Responses upstream (it knows none of the gateway's vector
    stores): the gateway runs the search there too, as on every route."""
    from responses_api.models import ModelRoute, Provider, RouteTarget
    from responses_api.orchestration import routing

    store_id, ids = kb
    options = {"max_tokens": 1000} if kind == "anthropic" else {}
    provider = Provider.objects.create(
        name=f"p-{kind}",
        kind=kind,
        base_url=scripted.base_url,
        api_key_encrypted=routing.encrypt_secret("sk-test"),
        options=options,
    )
    route = ModelRoute.objects.create(name=f"{kind}-model")
    RouteTarget.objects.create(route=route, provider=provider, upstream_model=f"up-{kind}")
    routing.clear_cache()
    scripted.enqueue(f"up-{kind}", Reply(tool_calls=[_call("income tax")]), Reply(text="Due in April (taxes.txt)."))
    with gateway.http() as http:
        raw = http.post(
            "/v1/responses",
            json={
                "model": f"{kind}-model",
                "input": "When are taxes due?",
                "stream": True,
                "tools": [{"type": "file_search", "vector_store_ids": [store_id]}],
                "include": ["file_search_call.results"],
            },
        )
    terminal = validate_sse(raw.text)
    search, message = terminal["output"]
    assert search["type"] == "file_search_call" and search["results"][0]["file_id"] == ids["taxes"]
    assert message["content"][0]["annotations"][0]["file_id"] == ids["taxes"]
    first = next(r.body for r in scripted.requests if r.body.get("model") == f"up-{kind}")
    names = [t.get("name") for t in first["tools"]]
    assert names == ["file_search"] and all(t.get("type") != "file_search" for t in first["tools"])


def test_file_search_over_a_websocket(
    gateway: Gateway, scripted: ScriptedUpstream, kb: tuple[str, dict[str, str]]
) -> None:
    from tests.websocket.test_websocket_mode import completed, socket

    store_id, ids = kb
    scripted.enqueue(MODEL, Reply(tool_calls=[_call("tomatoes")]), Reply(text="In full sun (garden.txt)."))
    with socket(gateway) as ws:
        final = completed(
            ws,
            input="Where do tomatoes grow best?",
            tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
            include=["file_search_call.results"],
        )
    search, message = final["output"]
    assert search["type"] == "file_search_call" and search["results"][0]["file_id"] == ids["garden"]
    assert message["content"][0]["annotations"][0]["filename"] == "garden.txt"


def test_the_agents_sdks_file_search_tool(
    gateway: Gateway, scripted: ScriptedUpstream, kb: tuple[str, dict[str, str]]
) -> None:
    import importlib.util

    from tests.compat.conftest import need

    need("openai-agents", importlib.util.find_spec("agents") is not None)
    from agents import Agent, FileSearchTool, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    store_id, ids = kb
    scripted.enqueue(MODEL, Reply(tool_calls=[_call("dog walks")]), Reply(text="Daily walks (dogs.txt)."))
    client = AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)
    agent = Agent(
        name="librarian",
        instructions="Answer from the files.",
        tools=[FileSearchTool(vector_store_ids=[store_id], max_num_results=3, include_search_results=True)],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
    )
    result = Runner.run_sync(agent, "How often should a dog be walked?")
    assert result.final_output == "Daily walks (dogs.txt)."
    calls = [i.raw_item for i in result.new_items if getattr(i.raw_item, "type", None) == "file_search_call"]
    assert calls and calls[0].results and calls[0].results[0].file_id == ids["dogs"]  # type: ignore[union-attr]
