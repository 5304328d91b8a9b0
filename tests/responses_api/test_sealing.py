"""Sealed blobs: round trip, and refusal of anything altered or foreign."""

import pytest

from responses_api.sealing import PREFIX, SealBroken, Sealer

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


def test_sealed_with_the_first_secret_opened_with_any():
    blob = SEALER.seal({"a": 1}, tenant_id=7, purpose="reasoning")
    rotated = Sealer(b"new secret", b"test secret")
    assert rotated.unseal(blob, tenant_id=7, purpose="reasoning") == {"a": 1}
    fresh = rotated.seal({"b": 2}, tenant_id=7, purpose="reasoning")
    assert Sealer(b"new secret").unseal(fresh, tenant_id=7, purpose="reasoning") == {"b": 2}
    with pytest.raises(SealBroken):  # sealed with the new secret, not the old one
        SEALER.unseal(fresh, tenant_id=7, purpose="reasoning")


def test_rotating_either_secret_keeps_sealed_data_open(settings):
    """What the README's rotation procedure does, step by step, through the settings the
    processes read: blobs and a provider key sealed before each step still open after it."""
    from cryptography.fernet import Fernet

    from responses_api.models import Provider
    from responses_api.orchestration.routing import encrypt_secret, provider_secret

    settings.GATEWAY_ENCRYPTION_KEY = []
    settings.SECRET_KEY_FALLBACKS = []
    settings.SECRET_KEY = "first-secret-key-" + "a1b2c3d4e5" * 5
    from responses_api.sealing import sealer

    def sealed_now() -> tuple[str, Provider]:
        return (
            sealer().seal({"n": 1}, tenant_id=3, purpose="compaction"),
            Provider(name="p", base_url="http://x", api_key_encrypted=encrypt_secret("sk-upstream")),
        )

    def still_open(*sealed: tuple[str, Provider]) -> None:
        for blob, provider in sealed:
            assert sealer().unseal(blob, tenant_id=3, purpose="compaction") == {"n": 1}
            assert provider_secret(provider) == "sk-upstream"

    before_key = sealed_now()
    # 1. A dedicated key is set: it seals from now on, SECRET_KEY's derived key still opens.
    first_key = Fernet.generate_key().decode()
    settings.GATEWAY_ENCRYPTION_KEY = [first_key]
    with_first_key = sealed_now()
    still_open(before_key, with_first_key)
    with pytest.raises(SealBroken):
        Sealer(settings.SECRET_KEY.encode()).unseal(with_first_key[0], tenant_id=3, purpose="compaction")
    # 2. It is rotated: the new key first, the old one kept for opening.
    settings.GATEWAY_ENCRYPTION_KEY = [Fernet.generate_key().decode(), first_key]
    with_second_key = sealed_now()
    still_open(before_key, with_first_key, with_second_key)
    # 3. SECRET_KEY is rotated, the old one moved to SECRET_KEY_FALLBACKS.
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "second-secret-key-" + "f6g7h8i9j0" * 5
    still_open(before_key, with_first_key, with_second_key)
    # Without the fallback, what the first SECRET_KEY sealed no longer opens: the fallback is what kept it.
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(SealBroken):
        sealer().unseal(before_key[0], tenant_id=3, purpose="compaction")
    still_open(with_first_key, with_second_key)
