"""The served OpenAPI document and the server agree: schemathesis builds requests from
`/v1/openapi.json` (valid ones and ones the document forbids) and checks every answer's status
code, content type, headers and body against the document, and that none is a 5xx. Fixed seed
and a bounded number of cases per operation, so CI is repeatable; a longer run is
`GATEWAY_SCHEMATHESIS_EXAMPLES=500 pytest <this file>`.

Not yet checked (EXCLUDED): that every request the document allows is accepted and every one it
forbids refused. The document is still looser than the parsers (an empty `model`, `after=0`,
a create without `input`...): `GATEWAY_SCHEMATHESIS_ONLY_EXCLUDED=1 pytest <this file>` lists
them, for the follow-up that tightens the document (or the parsers) until both pass. The
hypothesis fuzz beside this file (test_openapi_fuzz.py) stays: it sends hostile values (NUL,
surrogates, deep nesting) into every field, which schemathesis's schema-driven values rarely reach.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from tests.support.harness import MODEL, Gateway
from tests.support.upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.embedded


EXCLUDED = [positive_data_acceptance, negative_data_rejection]
EXAMPLES = int(os.environ.get("GATEWAY_SCHEMATHESIS_EXAMPLES", "12"))


def test_every_answer_matches_the_document(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from hypothesis import given

    scripted.set_default(MODEL, Reply(text="ok"))
    document = gateway.http().get("/v1/openapi.json").json()
    loaded = schemathesis.openapi.from_dict(document)
    loaded.config.update(base_url=gateway.url, headers={"Authorization": f"Bearer {gateway.key}"})
    failures: list[str] = []
    for result in loaded.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case) -> None:  # type: ignore[no-untyped-def]
            if os.environ.get("GATEWAY_SCHEMATHESIS_ONLY_EXCLUDED"):  # the follow-up list (docstring)
                case.call_and_validate(checks=EXCLUDED)
            else:
                case.call_and_validate(excluded_checks=EXCLUDED)

        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - every operation is reported
            failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert not failures, "\n\n".join(failures)
