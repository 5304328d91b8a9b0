"""The served OpenAPI document and the server agree: schemathesis builds requests from
`/v1/openapi.json` (valid ones and ones the document forbids) and checks every answer's status
code, content type, headers and body against the document, that none is a 5xx, that every request
the document allows is accepted and every one it forbids is refused. Fixed seed and a bounded
number of cases per operation, so CI is repeatable; a longer run is
`GATEWAY_SCHEMATHESIS_EXAMPLES=500 GATEWAY_TEST_DB=sqlite pytest -m embedded <this file>`.

The allowances: a well-formed reference to an id that does not exist (a cursor, a conversation)
is refused with a 400 naming the field, and no document can say which ids exist; an upload whose
bytes are not of an accepted type (or not of the type declared) is refused, and no document can
say which bytes a PDF is.

The hypothesis fuzz beside this file (test_openapi_fuzz.py) stays: it sends hostile values (NUL,
surrogates, deep nesting) into every field, which schemathesis's schema-driven values rarely reach.
"""

from __future__ import annotations

import os
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


# A reference to something that does not exist (a cursor, an earlier response, a conversation;
# a `tool_choice` naming a tool the request does not declare) and two tools (or MCP servers) of
# one name are
# well-formed requests the server must refuse with a 400 naming the field: no document can say
# which ids exist, nor tie one field's values to another's. Only those refusals, recognised by
# their messages, are not positive-data failures.
UNKNOWN_REFERENCE = re.compile(
    r"^('[\w.\[\]]+'(: no \w+ found with id | .* is not one of the request's \w+ tools\.$)|Duplicate (tool name|MCP server_label) )"
)


# An upload whose bytes are not of a type the gateway takes (or not of the type declared): no
# document can say which bytes a PDF is, so the refusal (400, `param` "file") is not a failure.
FILE_CONTENT_CODES = frozenset({"unsupported_file", "invalid_file_content"})


@schemathesis.check
def accepts_valid_data(ctx, response, case):
    if response.status_code == 400 and UNKNOWN_REFERENCE.match(response.json()["error"]["message"]):
        return None
    if response.status_code == 400 and response.json()["error"].get("code") in FILE_CONTENT_CODES:
        return None
    return positive_data_acceptance(ctx, response, case)


EXAMPLES = int(os.environ.get("GATEWAY_SCHEMATHESIS_EXAMPLES", "12"))


def test_every_answer_matches_the_document(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from hypothesis import given

    scripted.set_default(MODEL, Reply(text="ok"))
    document = gateway.http().get("/v1/openapi.json").json()
    loaded = schemathesis.openapi.from_dict(document)
    loaded.config.update(base_url=gateway.url, headers={"Authorization": f"Bearer {gateway.key}"})
    failures: list[str] = []
    for result in loaded.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]  # an Err would fail the test here, as it should

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            case.call_and_validate(
                excluded_checks=[positive_data_acceptance],
                additional_checks=[accepts_valid_data, negative_data_rejection],
            )

        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - every operation is reported
            failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert not failures, "\n\n".join(failures)
