"""Opaque blobs the gateway hands to clients and must get back unaltered.

`encrypted_content` of reasoning items and of compaction items is data the gateway
gives a client so that a later `store: false` request can carry it back. The
client may hold it but must neither read nor forge it, and a blob sealed for one
tenant must not open for another: AES-256-GCM, with the tenant and the blob's
purpose bound in as associated data. The key is derived (HKDF) from
GATEWAY_ENCRYPTION_KEY, or SECRET_KEY when that is unset, like provider secrets.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from functools import lru_cache
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX = "gwsealed1."
_NONCE_BYTES = 12


class SealBroken(ValueError):
    """The blob was not sealed by this gateway for this tenant and purpose (or was altered)."""


class Sealer:
    def __init__(self, secret: bytes) -> None:
        key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"open-responses-gateway sealed blobs v1"
        ).derive(secret)
        self._aead = AESGCM(key)

    def seal(self, payload: Any, *, tenant_id: int, purpose: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        sealed = self._aead.encrypt(nonce, plain, _bound_to(tenant_id, purpose))
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
        try:
            plain = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _bound_to(tenant_id, purpose))
        except InvalidTag:
            raise SealBroken("altered, or sealed for another tenant or purpose") from None
        return json.loads(plain)


def _bound_to(tenant_id: int, purpose: str) -> bytes:
    return f"{purpose}\x00{tenant_id}".encode()


@lru_cache(maxsize=4)
def _sealer_for(secret: str) -> Sealer:
    return Sealer(secret.encode())


def sealer() -> Sealer:
    """The process's sealer for the configured key (cached; settings may change in tests)."""
    from django.conf import settings

    return _sealer_for(settings.GATEWAY_ENCRYPTION_KEY or settings.SECRET_KEY)
