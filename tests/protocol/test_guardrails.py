"""The guardrail detectors and the body walk (responses_api/protocol/guardrails.py), pure."""

from __future__ import annotations

import pytest

from responses_api.protocol.guardrails import GuardrailConfigError, compile_detector, scan


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
        judge_categories,
        moderation_categories,
        remote_settings,
    )

    moderation = remote_settings("moderation", "block", {"url": "http://m", "categories": ["hate"]})
    anything = remote_settings("moderation", "log", {"url": "http://m"})
    answer = {"results": [{"flagged": True, "categories": {"hate": False, "violence": True}}]}
    assert moderation_categories(moderation, answer) == []  # violence does not count for it
    assert moderation_categories(anything, answer) == ["violence"]
    broken: object
    for broken in ({}, {"results": []}, {"results": [{"categories": {}}]}, ["no"]):
        with pytest.raises(RemoteCheckFailed):
            moderation_categories(anything, broken)
    judge = remote_settings("judge", "block", {"route": "r", "policy": "p", "categories": ["medical"]})
    assert judge_categories(judge, '{"allowed": true}') == []
    assert judge_categories(judge, '```json\n{"allowed": false, "category": "medical"}\n```') == ["medical"]
    # A category the operator did not list is recorded as `policy`: the model's words might quote the text.
    assert judge_categories(judge, '{"allowed": false, "category": "some text"}') == ["policy"]
    for unclear in ("yes", '{"allowed": "no"}', "[]", ""):
        with pytest.raises(RemoteCheckFailed):
            judge_categories(judge, unclear)
    # Compiled: a whole-text detector that finds nothing without its call; redact is refused.
    detector = compile_detector(4, "j", "judge", "log", {"route": "r", "policy": "p"})
    assert detector.whole_text and detector.find("anything") == []
    with pytest.raises(GuardrailConfigError) as raised:
        compile_detector(5, "m", "moderation", "redact", {"url": "http://m"})
    assert raised.value.field == "action"
