"""What a run sends and produces: the context fitted to the route's window (truncation), a
compaction's summary sealed into its item, reasoning and refusals, a warm-up that calls no model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from responses_api.engine.run import ResponseRun
from responses_api.protocol.deltas import Finish, ReasoningDelta, RefusalDelta, TextDelta, Usage
from responses_api.protocol.errors import InvalidRequest, UpstreamError
from responses_api.sealing import sealer
from tests.engine.standins import Stored, Tools, Upstream, drive, make_job, to_end
from tests.support.stream_validator import validate_events

pytestmark = pytest.mark.embedded


def turns(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"turn {i}: " + "words " * 40}]}
        for i in range(n)
    ]


def sent_texts(upstream: Upstream) -> list[str]:
    return [i["content"][0]["text"] for i in upstream.requests[-1][1].items if i["type"] == "message"]


def test_truncation_auto_drops_the_oldest_items_to_fit_the_window() -> None:
    upstream = Upstream([TextDelta("ok"), Finish("stop")])
    body = {"input": turns(8), "truncation": "auto", "max_output_tokens": 100}
    run = ResponseRun(make_job(body, window=450), Stored(), Tools(), open_upstream=upstream)
    result = asyncio.run(to_end(run))
    texts = sent_texts(upstream)
    assert result["status"] == "completed" and run.truncated_items == 8 - len(texts) > 0
    assert texts[-1].startswith("turn 7:") and not texts[0].startswith("turn 0:")


def test_a_context_within_the_window_is_sent_whole() -> None:
    upstream = Upstream([TextDelta("ok"), Finish("stop")])
    body = {"input": turns(2), "truncation": "auto", "max_output_tokens": 100}
    run = ResponseRun(make_job(body, window=600), Stored(), Tools(), open_upstream=upstream)
    asyncio.run(to_end(run))
    assert len(sent_texts(upstream)) == 2 and run.truncated_items == 0


def test_without_truncation_an_over_long_context_is_a_400_before_the_upstream() -> None:
    upstream = Upstream([TextDelta("never"), Finish("stop")])
    stored = Stored()
    run = ResponseRun(make_job({"input": turns(8)}, window=450), stored, Tools(), open_upstream=upstream)
    with pytest.raises(InvalidRequest) as refused:
        asyncio.run(run.connect())
    assert refused.value.code == "context_length_exceeded" and upstream.requests == []
    assert stored.finished[-1]["status"] == "failed"


def test_even_with_truncation_a_newest_item_too_long_alone_is_a_400() -> None:
    body = {"input": [turns(1)[0] | {"content": [{"type": "input_text", "text": "x " * 3000}]}], "truncation": "auto"}
    run = ResponseRun(make_job(body, window=600), Stored(), Tools(), open_upstream=Upstream())
    with pytest.raises(InvalidRequest) as refused:
        asyncio.run(run.connect())
    assert "newest item alone" in refused.value.message


def test_a_compaction_seals_the_summary_into_one_item_and_streams_no_text() -> None:
    upstream = Upstream([TextDelta("They talked "), TextDelta("about turns."), Usage(50, 6), Finish("stop")])
    stored = Stored()
    body = {"input": [*turns(3), {"type": "compaction_trigger"}], "stream": True}
    run = ResponseRun(make_job(body), stored, Tools(), open_upstream=upstream)
    events = drive(run)
    validate_events(events)
    assert not any(e["type"] == "response.output_text.delta" for e in events)
    (item,) = stored.finished[0]["output"]
    assert item["type"] == "compaction"
    payload = sealer().unseal(item["encrypted_content"], tenant_id=1, purpose="compaction")
    assert "They talked about turns." in str(payload)
    assert upstream.requests[0][1].tools == []  # the summariser gets no tools


def test_a_compaction_without_a_summary_fails() -> None:
    upstream = Upstream([TextDelta("   "), Finish("stop")])
    stored = Stored()
    body = {"input": [*turns(1), {"type": "compaction_trigger"}], "stream": True}
    run = ResponseRun(make_job(body), stored, Tools(), open_upstream=upstream)
    events = drive(run)
    assert events[-1]["type"] == "response.failed"
    assert isinstance(run.error, UpstreamError) and stored.finished[-1]["error"]["code"] == "upstream_empty"


def test_reasoning_comes_before_the_answer_as_its_own_item() -> None:
    upstream = Upstream([ReasoningDelta("Let me think. "), TextDelta("Yes."), Finish("stop")])
    stored = Stored()
    run = ResponseRun(make_job({"input": "x", "stream": True}), stored, Tools(), open_upstream=upstream)
    validate_events(drive(run))
    output = stored.finished[0]["output"]
    assert [i["type"] for i in output] == ["reasoning", "message"]


def test_reasoning_asked_for_encrypted_is_sealed_for_the_tenant() -> None:
    upstream = Upstream([ReasoningDelta("Private thoughts."), TextDelta("Yes."), Finish("stop")])
    stored = Stored()
    body = {"input": "x", "include": ["reasoning.encrypted_content"], "store": False}
    run = ResponseRun(make_job(body), stored, Tools(), open_upstream=upstream)
    result = asyncio.run(to_end(run))
    reasoning = result["output"][0]
    opened = sealer().unseal(reasoning["encrypted_content"], tenant_id=1, purpose="reasoning")
    assert opened == {"text": "Private thoughts."}


def test_a_refusal_is_a_refusal_part_of_the_message() -> None:
    upstream = Upstream([RefusalDelta("I can't help with that."), Finish("stop")])
    run = ResponseRun(make_job({"input": "x"}), Stored(), Tools(), open_upstream=upstream)
    result = asyncio.run(to_end(run))
    part = result["output"][0]["content"][0]
    assert part == {**part, "type": "refusal", "refusal": "I can't help with that."}


def test_a_warm_up_calls_no_model_and_completes_empty() -> None:
    upstream = Upstream()
    stored = Stored()
    run = ResponseRun(make_job({"input": "x", "generate": False}), stored, Tools(), open_upstream=upstream)
    result = asyncio.run(to_end(run))
    assert upstream.requests == [] and result["status"] == "completed" and result["output"] == []
    assert stored.finished[0]["status"] == "completed"


def test_the_upstream_streams_as_the_client_asked_unless_the_run_says_otherwise() -> None:
    for body, stream_upstream, expected in (
        ({"input": "x"}, None, False),
        ({"input": "x", "stream": True}, None, True),
        ({"input": "x"}, True, True),
    ):
        upstream = Upstream([TextDelta("ok"), Finish("stop")])
        run = ResponseRun(make_job(body), Stored(), Tools(), stream_upstream=stream_upstream, open_upstream=upstream)
        asyncio.run(to_end(run))
        assert upstream.requests[0][1].stream is expected, body
