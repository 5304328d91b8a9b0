"""The output guard (responses_api/protocol/output_guard.py), pure: a stream of neutral deltas
in, what may be released out; the hold-back, a match split across deltas, block, redact, log,
tool-call arguments and whole-text guardrails (buffered or log only)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from responses_api.protocol.deltas import Finish, TextDelta, ToolCallDelta, Usage
from responses_api.protocol.guardrails import Detector, compile_detector
from responses_api.protocol.output_guard import OutputDetectors, OutputGuard

SECRET = "AKIAIOSFODNN7EXAMPLE"


def words(action: str, *words: str, gid: int = 1) -> Detector:
    return compile_detector(gid, f"g{gid}", "patterns", action, {"categories": {"codename": {"words": list(words)}}})


def creds(action: str, gid: int = 2) -> Detector:
    return compile_detector(gid, f"g{gid}", "pii", action, {"categories": ["credential"]})


def run(guard: OutputGuard, batches: list[list[Any]]) -> list[list[Any]]:
    async def go() -> list[list[Any]]:
        out = [await guard.feed(batch) for batch in batches]
        if guard.blocked is None:
            out.append(await guard.end())
        return out

    return asyncio.run(go())


def text_of(released: list[list[Any]]) -> str:
    return "".join(d.text for batch in released for d in batch if isinstance(d, TextDelta))


def chars(text: str, size: int = 3) -> list[list[Any]]:
    return [[TextDelta(text[i : i + size])] for i in range(0, len(text), size)]


def test_text_is_held_back_then_released_unchanged() -> None:
    guard = OutputGuard(OutputDetectors(output=(words("block", "zeus"),)), holdback=10)
    text = "Nothing to see here, all quite ordinary and long enough."
    out = run(guard, chars(text))
    assert text_of(out) == text
    assert out[0] == [] and out[1] == [] and out[2] == []  # the first 10 characters wait
    assert guard.blocked is None and guard.take_decisions() == []


def test_a_secret_split_across_deltas_is_blocked_before_any_of_it_is_released() -> None:
    guard = OutputGuard(OutputDetectors(output=(creds("block"),)), holdback=32)
    text = f"The key is {SECRET} and more text follows here."
    out = run(guard, chars(text, 4))
    released = text_of(out)
    assert released == "The key is "
    assert not any(part in released for part in (SECRET[:4], "AKIA"))
    flat = [d for batch in out for d in batch]
    assert flat[-1] == Finish("content_filter")  # and nothing after it
    assert guard.blocked is not None and guard.blocked.category == "credential"
    assert [(d.guardrail, d.action) for d in guard.take_decisions()] == [("g2", "block")]
    # Blocked: nothing more, whatever the upstream still sends.
    assert asyncio.run(guard.feed([TextDelta("more")])) == []


def test_redact_replaces_a_split_match_and_log_passes() -> None:
    guard = OutputGuard(OutputDetectors(output=(creds("redact"), words("log", "zeus", gid=3))), holdback=24)
    text = f"Zeus says: use {SECRET} now, then stop."
    out = run(guard, chars(text, 5))
    assert text_of(out) == "Zeus says: use [REDACTED:credential] now, then stop."
    assert sorted((d.guardrail, d.action) for d in guard.take_decisions()) == [("g2", "redact"), ("g3", "log")]


def test_a_word_at_the_edge_of_what_is_held_is_not_decided_early() -> None:
    """A word at the end of the text so far ("Zeus") may be another ("Zeusberg"): it waits."""
    guard = OutputGuard(OutputDetectors(output=(words("block", "zeus"),)), holdback=4)
    out = run(guard, [[TextDelta("Visit Zeus")], [TextDelta("berg, a town.")]])
    assert text_of(out) == "Visit Zeusberg, a town." and guard.blocked is None


def test_tool_call_arguments_are_held_back_and_redacted() -> None:
    guard = OutputGuard(OutputDetectors(tool_arguments=(creds("redact"),)), holdback=32)
    args = '{"key": "' + SECRET + '"}'
    batches = [[ToolCallDelta(0, "call_1", "lookup", args[:8])]] + [
        [ToolCallDelta(0, arguments=args[i : i + 5])] for i in range(8, len(args), 5)
    ]
    out = run(guard, [*batches, [Finish("tool_calls"), Usage(1, 2)]])
    flat = [d for batch in out for d in batch]
    assert flat[0] == ToolCallDelta(0, "call_1", "lookup", "")  # the call opens at once
    joined = "".join(d.arguments for d in flat if isinstance(d, ToolCallDelta))
    assert joined == '{"key": "[REDACTED:credential]"}'
    assert flat[-2:] == [Finish("tool_calls"), Usage(1, 2)]


def test_text_is_released_before_a_tool_call_starts() -> None:
    guard = OutputGuard(OutputDetectors(output=(words("block", "zeus"),)), holdback=50)
    out = run(guard, [[TextDelta("Let me look.")], [ToolCallDelta(0, "c", "f", "{}")]])
    assert out[0] == [] and out[1] == [TextDelta("Let me look."), ToolCallDelta(0, "c", "f", "{}")]


def whole(action: str, gid: int = 7) -> Detector:
    """A test-only whole-text detector: a patterns one marked as needing the whole answer."""
    return dataclasses.replace(words(action, "zeus", gid=gid), whole_text=True)


def test_whole_text_guardrails_buffer_the_stream_or_only_log() -> None:
    buffered = OutputGuard(OutputDetectors(output=(whole("block"),)), holdback=4)
    out = run(buffered, chars("A long answer about Zeus, written slowly.", 4))
    assert text_of(out) == "A long answer about " and buffered.blocked is not None
    assert all(batch == [] for batch in out[:-1])  # nothing before the end: the whole is checked

    logged = OutputGuard(OutputDetectors(output=(whole("block"),), log_only=frozenset({7})), holdback=4)
    out = run(logged, chars("A long answer about Zeus, written slowly.", 4))
    assert text_of(out) == "A long answer about Zeus, written slowly." and logged.blocked is None
    assert [(d.category, d.action) for d in logged.take_decisions()] == [("codename", "log")]


def test_tool_output_is_checked_whole() -> None:
    guard = OutputGuard(OutputDetectors(tool_output=(creds("redact"), words("block", "zeus", gid=3))), holdback=8)
    assert asyncio.run(guard.check_tool_output(f"key {SECRET}")) == ("key [REDACTED:credential]", None)
    text, blocked = asyncio.run(guard.check_tool_output("about Zeus"))
    assert blocked is not None and blocked.category == "codename"


def test_a_match_that_keeps_growing_is_not_held_forever() -> None:
    greedy = compile_detector(4, "greedy", "patterns", "redact", {"categories": {"rest": {"regex": ["secret.*"]}}})
    guard = OutputGuard(OutputDetectors(output=(greedy,)), holdback=8)
    out = run(guard, chars("a secret " + "x" * 2000, 10))
    assert any(batch for batch in out[3:-1])  # released as it goes, not only at the end
