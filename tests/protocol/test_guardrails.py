"""The guardrail detectors and the body walk (responses_api/protocol/guardrails.py), pure."""

from __future__ import annotations

import pytest

from responses_api.protocol.guardrails import GuardrailConfigError, Span, compile_detector, scan


def pii(action: str = "redact", **config):
    return compile_detector(1, "pii", "pii", action, config)


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("mail bob@example.org now", "email"),
        ("call +44 20 7946 0958 today", "phone"),
        ("card 4111-1111-1111-1111 ok", "card"),
        ("iban GB82 WEST 1234 5698 7654 32 ok", "iban"),
        ("key ghp_" + "a" * 36 + " ok", "credential"),
        ("-----BEGIN RSA PRIVATE KEY-----", "credential"),
    ],
)
def test_each_pii_category_is_found_and_redacted_readably(text: str, category: str) -> None:
    out, decisions = scan({"input": text}, ("input",), (pii(),))
    assert [d.category for d in decisions] == [category]
    assert f"[REDACTED:{category}]" in out["input"]


@pytest.mark.parametrize(
    "text",
    [
        "order 4111 1111 1111 1112 (fails Luhn)",
        "GB82 WEST 1234 5698 7654 33 (bad checksum)",
        "call 555 0100 (no country code, no region)",
        "a base64 blob aGVsbG8gd29ybGQgdGhpcyBpcyBsb25nIGFuZCBoaWdoIGVudHJvcHk=",
    ],
)
def test_lookalikes_pass(text: str) -> None:
    assert scan({"input": text}, ("input",), (pii(),))[1] == []


def test_never_scanned_fields_and_names_are_left_alone() -> None:
    det = compile_detector(2, "words", "patterns", "block", {"categories": {"c": {"words": ["zeus"]}}})
    items = [
        {"type": "reasoning", "encrypted_content": "zeus", "summary": []},
        {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "data:zeus"}]},
        {"type": "input_file", "filename": "zeus.pdf", "file_data": "zeus"},
        {"type": "function_call", "name": "zeus", "call_id": "zeus", "arguments": "{}"},
    ]
    assert scan({"input": items, "tools": [{"name": "zeus"}]}, ("input", "tools"), (det,))[1] == []
    _, found = scan(
        {"input": [{"type": "function_call_output", "call_id": "c", "output": "ZEUS!"}]}, ("input",), (det,)
    )
    assert [(d.category, d.action) for d in found] == [("c", "block")]


def test_words_match_whole_words_only() -> None:
    det = compile_detector(2, "words", "patterns", "redact", {"categories": {"c": {"words": ["zeus"]}}})
    out, _ = scan({"input": "Zeus, zeusberg, ZEUS"}, ("input",), (det,))
    assert out["input"] == "[REDACTED:c], zeusberg, [REDACTED:c]"


def test_config_errors_name_the_key() -> None:
    with pytest.raises(GuardrailConfigError) as raised:
        compile_detector(1, "p", "patterns", "block", {"categories": {"c": {"regex": ["("]}}})
    assert raised.value.field == "categories.c.regex[0]"
    with pytest.raises(GuardrailConfigError) as raised:
        pii(phone_region="XX")
    assert raised.value.field == "phone_region"
    # A category is named in the audit row (200 characters) and the error: bounded where defined.
    with pytest.raises(GuardrailConfigError) as raised:
        compile_detector(1, "p", "patterns", "block", {"categories": {"c" * 201: {"words": ["x"]}}})
    assert raised.value.field == "categories"


def test_remote_verdicts_are_read_strictly() -> None:
    from responses_api.protocol.guardrail_remote import (
        RemoteCheckFailed,
        compile_remote,
        judge_spans,
        moderation_spans,
    )

    text = "some text"
    moderation = compile_remote(1, "m", "moderation", "block", {"url": "http://m", "categories": ["hate"]}).settings
    anything = compile_remote(2, "m2", "moderation", "log", {"url": "http://m"}).settings
    assert moderation is not None and anything is not None
    answer = {"results": [{"flagged": True, "categories": {"hate": False, "violence": True}}]}
    assert moderation_spans(moderation, answer, text) == []  # violence does not count for it
    assert moderation_spans(anything, answer, text) == [Span(0, len(text), "violence")]
    broken: object
    for broken in ({}, {"results": []}, {"results": [{"categories": {}}]}, ["no"]):
        with pytest.raises(RemoteCheckFailed):
            moderation_spans(anything, broken, text)
    judge = compile_remote(3, "j", "judge", "block", {"route": "r", "policy": "p", "categories": ["medical"]}).settings
    assert judge is not None
    assert judge_spans(judge, '{"allowed": true}', text) == []
    assert judge_spans(judge, '```json\n{"allowed": false, "category": "medical"}\n```', text) == [
        Span(0, len(text), "medical")
    ]
    # A category the operator did not list is recorded as `policy`: the model's words might quote the text.
    assert judge_spans(judge, '{"allowed": false, "category": "some text"}', text) == [Span(0, len(text), "policy")]
    for unclear in ("yes", '{"allowed": "no"}', "[]", ""):
        with pytest.raises(RemoteCheckFailed):
            judge_spans(judge, unclear, text)
