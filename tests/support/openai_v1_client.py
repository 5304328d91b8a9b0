"""Runs under an openai 1.x install (its stream helper is the strictest about event order).

Usage: python openai_v1_client.py BASE_URL KEY MODEL CASE -> prints one JSON line with the outcome.
"""

from __future__ import annotations

import json
import sys

import openai

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "type": "function",
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
]


def main() -> None:
    base_url, key, model, case = sys.argv[1:5]
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    result: dict = {"version": openai.__version__, "case": case}
    try:
        # The ignore: this runs under openai 1.x; the pinned SDK's tool param types do not describe it.
        with client.responses.stream(model=model, input="hi", tools=TOOLS) as stream:  # type: ignore[arg-type]
            result["events"] = [event.type for event in stream]
            final = stream.get_final_response()
        result["status"] = final.status
        result["output_types"] = [item.type for item in final.output]
        result["output_text"] = final.output_text
    except openai.APIError as exc:
        result["error"] = type(exc).__name__
    except RuntimeError as exc:  # the helper's own order checks
        result["error"] = f"RuntimeError: {exc}"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
