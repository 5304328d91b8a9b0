"""A JSON schema as Anthropic's structured outputs take it (`output_config.format.schema`).

Anthropic constrains decoding to a subset of JSON Schema: every object must be closed
(`additionalProperties: false`, refused otherwise), `oneOf` is spelled `anyOf`, and numeric,
string-length, pattern and most array constraints are not supported. As Anthropic's own SDKs do
before sending a schema, constraints outside the subset move into the description (the model
still reads them; the client's parser, pydantic behind `responses.parse`, still checks them).
OpenAI's strict schemas are already closed, so for them this changes little."""

from __future__ import annotations

from typing import Any

# String formats Anthropic's decoder supports; another format moves into the description.
SUPPORTED_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
# Keywords kept as they are (schemas inside them are handled below).
_KEPT = ("type", "enum", "const", "description", "title", "required", "$ref")


def anthropic_json_schema(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    rest = dict(schema)
    out: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        if isinstance(rest.get(key), dict):
            out[key] = {name: anthropic_json_schema(sub) for name, sub in rest.pop(key).items()}
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(rest.get(key), list):
            out["allOf" if key == "allOf" else "anyOf"] = [anthropic_json_schema(sub) for sub in rest.pop(key)]
    for key in _KEPT:
        if key in rest:
            out[key] = rest.pop(key)
    kind = out.get("type")
    kinds: list[Any] = kind if isinstance(kind, list) else [kind]
    if "object" in kinds or "properties" in rest:
        properties = rest.pop("properties", None)
        out["properties"] = {
            name: anthropic_json_schema(sub)
            for name, sub in (properties if isinstance(properties, dict) else {}).items()
        }
        rest.pop("additionalProperties", None)
        out["additionalProperties"] = False
    if "items" in rest:
        out["items"] = anthropic_json_schema(rest.pop("items"))
    if rest.get("minItems") in (0, 1):
        out["minItems"] = rest.pop("minItems")
    if rest.get("format") in SUPPORTED_FORMATS:
        out["format"] = rest.pop("format")
    if rest:
        unsupported = "{" + ", ".join(f"{key}: {value}" for key, value in rest.items()) + "}"
        description = out.get("description")
        out["description"] = f"{description}\n\n{unsupported}" if description else unsupported
    return out
