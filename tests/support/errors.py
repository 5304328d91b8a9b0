"""The error object of an OpenAI SDK error, typed: the SDK types `APIStatusError.body` as `object`."""

from __future__ import annotations

from typing import Any

import openai


def error_body(exc: openai.APIStatusError) -> dict[str, Any]:
    """`exc.body`: the gateway's `error` object (the SDK unwraps it), a dict by the API's contract."""
    body = exc.body
    assert isinstance(body, dict), body
    return body
