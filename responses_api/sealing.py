"""Opaque blobs the gateway hands to clients and must get back unaltered.

`encrypted_content` of reasoning items and of compaction items is data the gateway
gives a client so that a later `store: false` request can carry it back. The
client may hold it but must neither read nor forge it, and a blob sealed for one
tenant must not open for another: AES-256-GCM, with the tenant and the blob's
purpose bound in as associated data. The keys are derived (HKDF) from the secrets
`encryption_secrets()` lists, newest first: a blob is sealed with the first and opened with
any, so rotating GATEWAY_ENCRYPTION_KEY or SECRET_KEY keeps what was sealed before readable
while the old secret stays listed (README.md, "Rotating secrets").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

PREFIX = "gwsealed1."
_NONCE_BYTES = 12


class SealBroken(ValueError):
    """The blob was not sealed by this gateway for this tenant and purpose (or was altered)."""


class Sealer:
    """Seals with the first secret; opens what any of them sealed."""

    def __init__(self, secret: bytes, *older: bytes) -> None:
        self._aeads = [
            AESGCM(
                HKDF(
                    algorithm=hashes.SHA256(), length=32, salt=None, info=b"open-responses-gateway sealed blobs v1"
                ).derive(s)
            )
            for s in (secret, *older)
        ]

    def seal(self, payload: Any, *, tenant_id: int, purpose: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        sealed = self._aeads[0].encrypt(nonce, plain, _bound_to(tenant_id, purpose))
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def unseal(self, blob: Any, *, tenant_id: int, purpose: str) -> Any:
        if not isinstance(blob, str) or not blob.startswith(PREFIX):
            raise SealBroken("not a blob sealed by this gateway")
        body = blob[len(PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise SealBroken("not a blob sealed by this gateway") from None
        if len(raw) <= _NONCE_BYTES:
            raise SealBroken("not a blob sealed by this gateway")
        for aead in self._aeads:
            try:
                plain = aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _bound_to(tenant_id, purpose))
            except InvalidTag:
                continue
            return json.loads(plain)
        raise SealBroken("altered, or sealed for another tenant or purpose")

    def reseal(self, blob: Any, *, tenant_id: int, purpose: str) -> str | None:
        """`blob` sealed under the first secret, or None when it already is (SealBroken as
        `unseal`: no listed secret opens it)."""
        payload = self.unseal(blob, tenant_id=tenant_id, purpose=purpose)
        body = blob[len(PREFIX) :]
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        try:
            self._aeads[0].decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _bound_to(tenant_id, purpose))
        except InvalidTag:
            return self.seal(payload, tenant_id=tenant_id, purpose=purpose)
        return None


def _bound_to(tenant_id: int, purpose: str) -> bytes:
    return f"{purpose}\x00{tenant_id}".encode()


def encryption_secrets() -> tuple[tuple[str, bool], ...]:
    """The secrets that seal blobs and provider keys, newest first, each with whether it is a
    GATEWAY_ENCRYPTION_KEY entry (a Fernet key) or SECRET_KEY / one of SECRET_KEY_FALLBACKS.

    The first seals. SECRET_KEY and its fallbacks always stay as opening secrets after the
    GATEWAY_ENCRYPTION_KEY ones: they sealed everything while no dedicated key was set, and
    a SECRET_KEY rotation (old key moved to SECRET_KEY_FALLBACKS) must not break that."""
    listed: dict[str, bool] = {}
    for key in settings.GATEWAY_ENCRYPTION_KEY:
        listed.setdefault(key, True)
    for key in (settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS):
        listed.setdefault(key, False)
    return tuple((key, is_fernet_key) for key, is_fernet_key in listed.items() if key)


@lru_cache(maxsize=4)
def _sealer_for(secrets: tuple[str, ...]) -> Sealer:
    return Sealer(*(s.encode() for s in secrets))


def sealer() -> Sealer:
    """The process's sealer for the configured secrets (cached; settings may change in tests)."""
    return _sealer_for(tuple(secret for secret, _ in encryption_secrets()))


def reasoning_sealer(tenant_id: int) -> Callable[[str], str]:
    """Reasoning text -> `encrypted_content` only this gateway can open, for this tenant."""
    seal = sealer().seal
    return lambda text: seal({"text": text}, tenant_id=tenant_id, purpose="reasoning")


def signed_reasoning_sealer(tenant_id: int) -> Callable[[str, str], str]:
    """Reasoning an upstream signed (Anthropic's thinking): text and signature sealed into
    `encrypted_content`, so that the next turn can give the upstream both back."""
    return lambda text, signature: sealer().seal(
        {"text": text, "signature": signature}, tenant_id=tenant_id, purpose="reasoning"
    )


# -- provider keys stored in the database (Fernet) ----------------------------------------


def _fernet() -> MultiFernet:
    """Encrypts with the newest secret, decrypts with any (`encryption_secrets()`'s list): a
    GATEWAY_ENCRYPTION_KEY entry is a Fernet key itself; SECRET_KEY's is derived from it."""
    keys = [
        secret if is_fernet_key else base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest()).decode()
        for secret, is_fernet_key in encryption_secrets()
    ]
    return MultiFernet([Fernet(key.encode()) for key in keys])


def encrypt_secret(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode()


def decrypt_secret(token: str) -> str:
    """Raises SealBroken when no listed secret opens it (one the operator dropped)."""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SealBroken("no listed encryption key opens it") from None


def reseal_secret(token: str) -> str:
    """The same secret encrypted under the first listed key (SealBroken as decrypt_secret)."""
    try:
        return _fernet().rotate(token.encode()).decode()
    except InvalidToken:
        raise SealBroken("no listed encryption key opens it") from None


def first_secret_opens(token: str) -> bool:
    """Whether the first listed key alone opens a Fernet token (it needs no re-sealing)."""
    secret, is_fernet_key = encryption_secrets()[0]
    key = secret if is_fernet_key else base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest()).decode()
    try:
        Fernet(key.encode()).decrypt(token.encode())
    except InvalidToken:
        return False
    return True
