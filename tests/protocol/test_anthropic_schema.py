"""protocol/anthropic_schema.py with plain data: a JSON schema in the subset Anthropic decodes."""

from __future__ import annotations

from responses_api.protocol.anthropic_schema import anthropic_json_schema


def test_objects_are_closed_and_unsupported_constraints_described_everywhere() -> None:
    schema = {
        "type": "object",
        "additionalProperties": True,
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "code": {"type": "string", "format": "iban", "pattern": "^[A-Z]+$"},
            "kind": {"oneOf": [{"$ref": "#/$defs/A"}, {"type": "integer", "maximum": 9, "description": "n"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        },
        "required": ["when"],
        "$defs": {"A": {"type": "object", "properties": {"a": {"const": 1}}}},
    }
    assert anthropic_json_schema(schema) == {
        "$defs": {"A": {"type": "object", "properties": {"a": {"const": 1}}, "additionalProperties": False}},
        "type": "object",
        "required": ["when"],
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "code": {"type": "string", "description": "{format: iban, pattern: ^[A-Z]+$}"},
            "kind": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "integer", "description": "n\n\n{maximum: 9}"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "{maxItems: 3}"},
        },
        "additionalProperties": False,
    }


def test_a_schema_already_in_the_subset_is_unchanged() -> None:
    strict = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": ["integer", "null"]}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    assert anthropic_json_schema(strict) == strict
