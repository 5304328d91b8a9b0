"""Sealed blobs: round trip, and refusal of anything altered or foreign."""

import pytest

from responses_api.store.sealing import PREFIX, SealBroken, Sealer

pytestmark = pytest.mark.embedded

SEALER = Sealer(b"test secret")


def test_round_trip_keeps_the_payload():
    blob = SEALER.seal({"text": "ünïcode \u0000 and all"}, tenant_id=7, purpose="reasoning")
    assert blob.startswith(PREFIX)
    assert "ünïcode" not in blob
    assert SEALER.unseal(blob, tenant_id=7, purpose="reasoning") == {"text": "ünïcode \u0000 and all"}


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:-2] + ("A" if b[-2] != "A" else "B") + b[-1],  # one character of the tag
        lambda b: b[: len(PREFIX) + 3] + ("x" if b[len(PREFIX) + 3] != "x" else "y") + b[len(PREFIX) + 4 :],
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: "gwsealed1.%%%",  # not base64
        lambda b: "gwsealed1.",  # empty
        lambda b: "opaque-from-another-provider",
    ],
)
def test_altered_blobs_are_refused(mutate):
    blob = SEALER.seal({"a": 1}, tenant_id=7, purpose="reasoning")
    with pytest.raises(SealBroken):
        SEALER.unseal(mutate(blob), tenant_id=7, purpose="reasoning")


def test_bound_to_tenant_purpose_and_key():
    blob = SEALER.seal({"a": 1}, tenant_id=7, purpose="reasoning")
    with pytest.raises(SealBroken):
        SEALER.unseal(blob, tenant_id=8, purpose="reasoning")
    with pytest.raises(SealBroken):
        SEALER.unseal(blob, tenant_id=7, purpose="compaction")
    with pytest.raises(SealBroken):
        Sealer(b"another secret").unseal(blob, tenant_id=7, purpose="reasoning")


def test_non_string_is_refused():
    with pytest.raises(SealBroken):
        SEALER.unseal(None, tenant_id=7, purpose="reasoning")
