"""`expand_compactions`, the rule of issue 46 on plain data: after a whole-context compaction
item the model gets what the same input placed before it, the summary, then what follows."""

from __future__ import annotations

from typing import Any

from responses_api.protocol.compaction import SUMMARY_PREFIX, WHOLE_SUMMARY_PREFIX, expand_compactions, span_after

PAYLOADS: dict[str, dict[str, Any]] = {
    "sealed-whole": {"summary": "S", "whole": True},
    "sealed-v1": {"summary": "V"},
    "sealed-auto": {"summary": "A", "whole": True, "auto": True},
}


def message(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def compaction(sealed: str = "sealed-whole") -> dict[str, Any]:
    return {"type": "compaction", "id": "cmp_1", "encrypted_content": sealed}


def texts(items: list[dict[str, Any]]) -> list[str]:
    return [i["content"][0]["text"] if i["type"] == "message" else i["type"] for i in items]


def test_the_issues_reproduction_keeps_the_developer_item_of_the_same_input() -> None:
    items = [
        message("developer", "RULES: answer in French"),
        message("user", "hi"),
        compaction(),
        message("user", "next"),
    ]
    expanded = expand_compactions(items, PAYLOADS.__getitem__, (range(4),))
    assert texts(expanded) == ["RULES: answer in French", "hi", WHOLE_SUMMARY_PREFIX + "S", "next"]
    assert expanded[0] is items[0]  # unchanged, not copied


def test_the_chain_before_the_input_is_dropped_with_its_tool_outputs() -> None:
    chain = [
        message("user", "old"),
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
    ]
    own = [
        message("developer", "rules"),
        {"type": "function_call_output", "call_id": "c1", "output": "late"},
        compaction(),
    ]
    expanded = expand_compactions([*chain, *own], PAYLOADS.__getitem__, (range(0, 1), range(3, 6)))
    assert texts(expanded) == ["rules", WHOLE_SUMMARY_PREFIX + "S"]


def test_an_item_a_response_produced_keeps_nothing_before_it() -> None:
    items = [message("developer", "rules"), message("user", "q"), compaction(), message("assistant", "a")]
    expanded = expand_compactions(items, PAYLOADS.__getitem__, (range(2),))  # the output is no input
    assert texts(expanded) == [WHOLE_SUMMARY_PREFIX + "S", "a"]


def test_a_v1_item_drops_nothing_and_no_compaction_is_the_list_itself() -> None:
    items = [message("user", "kept"), compaction("sealed-v1"), message("user", "next")]
    assert texts(expand_compactions(items, PAYLOADS.__getitem__)) == ["kept", SUMMARY_PREFIX + "V", "next"]
    plain = [message("user", "hi")]
    assert expand_compactions(plain, PAYLOADS.__getitem__) is plain


def test_inputs_with_nothing_answered_between_them_are_one_span() -> None:
    assert span_after((range(0, 1),), 1, 4) == (range(0, 4),)  # a warm-up, then the rest
    assert span_after((range(0, 1),), 2, 4) == (range(0, 1), range(2, 4))  # an output between
    assert span_after((), 0, 3) == (range(0, 3),)


def test_an_automatic_compaction_sent_back_keeps_only_the_instructions_before_it() -> None:
    """`context_management` clients send the whole history back, item included: the turns
    before it are what its summary replaced; the system and developer messages stay."""
    items = [
        message("system", "sys"),
        message("developer", "dev"),
        message("user", "old question"),
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        message("assistant", "old answer"),
        compaction("sealed-auto"),
        message("assistant", "answer"),
        message("user", "next"),
    ]
    expanded = expand_compactions(items, PAYLOADS.__getitem__, (range(9),))
    assert texts(expanded) == ["sys", "dev", WHOLE_SUMMARY_PREFIX + "A", "answer", "next"]
