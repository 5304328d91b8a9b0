"""A WebSocket lane's converted upstream prefix (protocol/prefix.py) through uvicorn, over a Chat
Completions, a Responses and an Anthropic Messages upstream: the body each continuation sends is
the one the uncached conversion sends, truncation clears the prefix, and no prefix crosses lanes,
connections or tenants."""

from __future__ import annotations

import json
from typing import Any

import pytest

from responses_api.protocol.compaction import SUMMARY_REQUEST
from responses_api.protocol.prefix import ConvertedPrefix
from tests.responses_api.test_anthropic import CLAUDE, anthropic  # noqa: F401 - the fixture
from tests.responses_api.test_native_responses import NATIVE, native  # noqa: F401 - the fixture
from tests.support.harness import MODEL, Gateway, make_key
from tests.support.stream_validator import validate_events
from tests.support.upstream import Reply, ScriptedUpstream
from tests.websocket.lanes import of_lane, read_until, responses, send, terminals
from tests.websocket.test_websocket_mode import socket, turn

pytestmark = pytest.mark.embedded

LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


@pytest.fixture(params=["chat", "responses", "anthropic"])
def kind(request: pytest.FixtureRequest, gateway: Gateway, scripted: ScriptedUpstream) -> tuple[str, str, str]:
    """(the upstream kind, the model the client asks for, the upstream model the server plays)."""
    if request.param == "responses":
        request.getfixturevalue("native")
        return "responses", NATIVE, "up-native"
    if request.param == "anthropic":
        request.getfixturevalue("anthropic")
        return "anthropic", CLAUDE, "claude-up"
    from responses_api.models import Provider
    from responses_api.orchestration import routing

    # Breakpoints and reasoning go to this Chat server too: both change the conversion.
    Provider.objects.filter(name="scripted").update(options={"send_prompt_cache": True, "send_reasoning": True})
    routing.clear_cache()
    return "chat", MODEL, MODEL


@pytest.fixture
def resumed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[ConvertedPrefix, bool]]:
    """Each lookup of a lane's prefix: (which lane's prefix, whether it served the call)."""
    calls: list[tuple[ConvertedPrefix, bool]] = []  # the objects: kept alive, never an id reused
    original = ConvertedPrefix.resume

    def spy(self: ConvertedPrefix, key: tuple[Any, ...], items: list[dict[str, Any]]) -> tuple[Any, int] | None:
        found = original(self, key, items)
        calls.append((self, found is not None))
        return found

    monkeypatch.setattr(ConvertedPrefix, "resume", spy)
    return calls


def completed(ws: Any, **body: Any) -> dict[str, Any]:
    final = validate_events(turn(ws, **{"model": MODEL, **body}))
    assert final["status"] == "completed", final
    return final


def marked(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text, "prompt_cache_breakpoint": {"mode": "explicit"}}


def user(*parts: str) -> dict[str, Any]:
    """A user message whose last part carries a cache breakpoint."""
    return {
        "role": "user",
        "content": [{"type": "input_text", "text": p} for p in parts[:-1]] + [marked(parts[-1])],
    }


# Turns of a chain: (the input, the upstream's reply). A client tool call and its output, merged
# assistant turns (text then a call), a developer message, and more cache breakpoints than
# Anthropic takes (the oldest marks are dropped from each body, never from the kept prefix), an
# answer that joins an assistant turn the input ended with.
CHAIN: list[tuple[list[dict[str, Any]], Reply]] = [
    (
        [{"role": "developer", "content": "Answer in English."}, user("Define", "serendipity")],
        Reply(tool_calls=[{"id": "call_1", "name": "lookup", "arguments": {"word": "serendipity"}}]),
    ),
    (
        [{"type": "function_call_output", "call_id": "call_1", "output": "a happy accident"}],
        Reply(text="It means luck."),
    ),
    ([user("And", "kismet?")], Reply(text="Fate.")),
    (
        [user("Look up", "zeitgeist")],
        Reply(text="Looking.", tool_calls=[{"id": "call_2", "name": "lookup", "arguments": {"word": "zeitgeist"}}]),
    ),
    ([{"type": "function_call_output", "call_id": "call_2", "output": "spirit of the age"}], Reply(text="Spirit.")),
    ([user("Next:", "hygge")], Reply(text="Coziness.")),
    # Input ending with the assistant's own words: the answer joins that assistant turn.
    ([user("Say", "hi"), {"role": "assistant", "content": "Sure:"}], Reply(text="hi")),
    ([user("Next:", "saudade")], Reply(text="Longing.")),
    ([user("Last:", "ubuntu")], Reply(text="Humanity.")),
]


def run_chain(gateway: Gateway, scripted: ScriptedUpstream, model: str, upstream: str, path: str) -> list[dict]:
    """The chain over one socket; the bodies the upstream received, in order."""
    scripted.enqueue(upstream, *(reply for _, reply in CHAIN))
    before = len(scripted.requests)
    previous: str | None = None
    with socket(gateway) as ws:
        for index, (items, _) in enumerate(CHAIN):
            body: dict[str, Any] = {
                "model": model,
                "input": items,
                "instructions": "Be brief.",
                "tools": [LOOKUP],
                "store": index != 2,  # an unstored link too: its context stays on the socket
            }
            if previous is not None:
                body["previous_response_id"] = previous
            previous = completed(ws, **body)["id"]
    bodies = [r.body for r in scripted.requests[before:] if r.path == path]
    assert len(bodies) == len(CHAIN)
    return bodies


def test_each_continuation_sends_the_body_the_uncached_conversion_sends(
    gateway: Gateway, scripted: ScriptedUpstream, kind: tuple[str, str, str], resumed: list, settings: Any
) -> None:
    dialect, model, upstream = kind
    settings.GATEWAY_WS_PREFIX_CACHE_MAX_ITEMS = 0  # no lane keeps one: every call converts it all
    uncached = run_chain(gateway, scripted, model, upstream, PATHS[dialect])
    assert resumed == []
    settings.GATEWAY_WS_PREFIX_CACHE_MAX_ITEMS = 10000
    cached = run_chain(gateway, scripted, model, upstream, PATHS[dialect])
    # Every continuation built on the lane's prefix (the first call had none to build on) ...
    assert [hit for _, hit in resumed] == [False] + [True] * (len(CHAIN) - 1)
    # ... and sent exactly what converting the whole context sends.
    assert cached == uncached
    if dialect == "anthropic":  # the marks were placed on copies: the limit held in each body
        for body in cached:
            marks = [b for m in body["messages"] for b in m["content"] if "cache_control" in b]
            assert 1 <= len(marks) <= 4
    # The last body holds the whole chain: the prefix did not lose or repeat an item.
    last = cached[-1]
    sent = last.get("messages") or last.get("input")
    text = repr(sent)
    for word in ("Define", "a happy accident", "kismet", "spirit of the age", "saudade", "ubuntu", "Looking."):
        assert text.count(word) == 1, word


def test_truncation_clears_the_prefix_and_sends_the_truncated_context(
    gateway: Gateway, scripted: ScriptedUpstream, resumed: list
) -> None:
    from responses_api.models import ModelRoute
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name=MODEL).update(context_window=300)  # tokens: a few turns fit
    routing.clear_cache()
    scripted.set_default(MODEL, Reply(text="ok " * 40))
    previous = None
    lookups: list[list[bool]] = []  # per turn: the prefix lookups of its call
    firsts: list[str] = []  # per turn: the first message sent
    with socket(gateway) as ws:
        for n in range(8):
            body: dict[str, Any] = {"input": f"turn {n} " + "word " * 40, "truncation": "auto"}
            if previous:
                body["previous_response_id"] = previous
            calls = len(resumed)
            previous = completed(ws, **body)["id"]
            lookups.append([hit for _, hit in resumed[calls:]])
            firsts.append(scripted.requests[-1].body["messages"][0]["content"])
    dropped_at = next(n for n, first in enumerate(firsts) if not first.startswith("turn 0 "))
    assert dropped_at >= 2
    # Until the window was full, each continuation built on the lane's prefix; from the call
    # that dropped the oldest items on, none did (the prefix was not even offered: cleared).
    assert lookups[:dropped_at] == [[False]] + [[True]] * (dropped_at - 1)
    assert lookups[dropped_at:] == [[]] * (8 - dropped_at)
    # What was sent is the newest turns in order, ending with the new input.
    messages = scripted.requests[-1].body["messages"]
    assert messages[-1]["content"] == "turn 7 " + "word " * 40
    users = [m["content"].split()[1] for m in messages if m["role"] == "user"]
    assert users == sorted(users) and users[-1] == "7" and users[0] != "0"


def test_a_fork_from_another_lane_never_gets_that_lanes_prefix(
    gateway: Gateway, scripted: ScriptedUpstream, resumed: list
) -> None:
    scripted.enqueue(MODEL, Reply(text="a one"), Reply(text="a two"), Reply(text="b own"), Reply(text="b fork"))
    with socket(gateway) as ws:
        send(ws, type="response.create", model=MODEL, input="secret of lane a", stream_id="a")
        (a1,) = responses(read_until(ws, terminals(1)))
        send(ws, type="response.create", model=MODEL, input="more", previous_response_id=a1["id"], stream_id="a")
        (a2,) = responses(read_until(ws, terminals(1)))
        assert len(resumed) == 2 and resumed[1][1]  # lane a's continuation built on lane a's prefix
        lane_a = resumed[1][0]
        send(ws, type="response.create", model=MODEL, input="lane b alone", stream_id="b")
        read_until(ws, terminals(1))
        # Lane b forks lane a's head: the context is lane a's (the connection's memory, as before),
        # but converted from scratch in lane b; lane a's prefix is not even looked at.
        send(ws, type="response.create", model=MODEL, input="fork", previous_response_id=a2["id"], stream_id="b")
        events = read_until(ws, terminals(1))
    (fork,) = responses(of_lane(events, "b"))
    assert fork["status"] == "completed"
    fork_lookups = resumed[3:]
    assert fork_lookups and all(prefix != lane_a and not hit for prefix, hit in fork_lookups)
    sent = [m["content"] for m in scripted.requests[-1].body["messages"]]
    assert sent == ["secret of lane a", "a one", "more", "a two", "fork"]  # not lane b's own chain


def test_no_prefix_crosses_connections_or_tenants(gateway: Gateway, scripted: ScriptedUpstream, resumed: list) -> None:
    scripted.set_default(MODEL, Reply(text="answer"))
    other_key, _ = make_key(tenant="other-co", name="other")
    with socket(gateway) as mine, socket(gateway, other_key) as theirs:
        first = completed(mine, input="tenant one's secret")
        head = completed(mine, input="go on", previous_response_id=first["id"])["id"]
        assert [hit for _, hit in resumed] == [False, True]  # this connection's lane built on its prefix
        mine_prefix = {prefix for prefix, _ in resumed}
        calls = len(scripted.requests)
        # Another tenant naming this tenant's head: not found, as an unknown id is; nothing
        # reaches the upstream and no prefix is looked up.
        events = turn(theirs, model=MODEL, input="go on", previous_response_id=head)
        unknown = turn(theirs, model=MODEL, input="go on", previous_response_id="resp_" + "0" * 48)
        assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "previous_response_not_found"
        assert events[-1]["status"] == unknown[-1]["status"]
        assert len(scripted.requests) == calls and len(resumed) == 2
        # The other tenant's own chain, with the same words, uses its own lane's prefix only.
        own = completed(theirs, input="tenant one's secret")
        assert scripted.requests[-1].body["messages"] == [{"role": "user", "content": "tenant one's secret"}]
        completed(theirs, input="go on", previous_response_id=own["id"])
        theirs_lookups = resumed[2:]
        assert [hit for _, hit in theirs_lookups] == [False, True]
        assert not {prefix for prefix, _ in theirs_lookups} & mine_prefix
    # The same tenant on a second connection continues from the store, converted from scratch.
    with socket(gateway) as again:
        completed(again, input="later", previous_response_id=head)
    (later,) = resumed[4:]
    assert later[0] not in mine_prefix and not later[1]
    sent = [m["content"] for m in scripted.requests[-1].body["messages"]]
    assert sent == ["tenant one's secret", "answer", "go on", "answer", "later"]


def test_automatic_compaction_clears_the_prefix_and_sends_the_uncached_bodies(
    gateway: Gateway, scripted: ScriptedUpstream, kind: tuple[str, str, str], resumed: list, settings: Any
) -> None:
    dialect, model, upstream = kind
    summaries: list[str] = []

    def reply(body: dict[str, Any]) -> Reply:
        if SUMMARY_REQUEST in json.dumps(body):
            summaries.append(f"Summary {len(summaries) + 1}: the user counts turns.")
            return Reply(text=summaries[-1])
        return Reply(text="Noted, and every earlier number kept in mind. " * 2)

    scripted.set_responder(upstream, reply)

    def session() -> tuple[list[dict], list[list[bool]], list[int]]:
        """12 turns on one socket: the upstream bodies, each turn's prefix lookups, and the turns
        that compacted."""
        before, previous = len(scripted.requests), None
        lookups, compacted = [], []
        summaries.clear()  # numbered per session: both sessions get the same words
        with socket(gateway) as ws:
            for n in range(12):
                body: dict[str, Any] = {
                    "model": model,
                    "input": f"Turn {n}: note the number {n} and keep counting with me.",
                    "context_management": [{"type": "compaction", "compact_threshold": 150}],
                }
                if previous:
                    body["previous_response_id"] = previous
                calls = len(resumed)
                final = completed(ws, **body)
                previous = final["id"]
                lookups.append([hit for _, hit in resumed[calls:]])
                if any(item["type"] == "compaction" for item in final["output"]):
                    compacted.append(n)
        return [r.body for r in scripted.requests[before:] if r.path == PATHS[dialect]], lookups, compacted

    settings.GATEWAY_WS_PREFIX_CACHE_MAX_ITEMS = 0
    uncached, _, compacted_uncached = session()
    settings.GATEWAY_WS_PREFIX_CACHE_MAX_ITEMS = 10000
    cached, lookups, compacted = session()
    assert len(compacted) >= 2 and compacted == compacted_uncached
    assert cached == uncached  # the summary calls and the calls proper alike
    for n in compacted:
        # The summary call was not given the prefix; the call proper after it found it cleared.
        assert lookups[n] == [False]
    # Between compactions, continuations built on the lane's prefix (from the compacted context).
    assert all(lookups[n] == [True] for n in range(1, 12) if n not in compacted)
