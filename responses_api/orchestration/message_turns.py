"""Storing the turns of Anthropic's Messages front door (api/messages_views.py), linear in the
new messages (the rule: protocol/messages_api.py, "Storage rule").

Each stored turn is remembered under the digest of the messages it was sent
(store/message_chains.py: in Redis, so whichever web process serves the next turn finds it); a
later request whose messages begin with those (the same conversation, resent whole with the
answer and the next user turn appended) is stored as a response chained to it
(`previous_response_id`) whose input is only the messages after that prefix and its answer. A
request no stored turn begins (a new session, a compacted or edited history, a session idle past
GATEWAY_MESSAGES_CHAIN_SECONDS) starts a new chain with all its messages. The system prompt is
stored with a chain's first turn and again only when it changes.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Any

from ..domain import Principal
from ..protocol.ids import new_id
from ..protocol.messages_api import MessagesWriter, output_items, prefix_hashes, stored_input
from ..store.message_chains import Turn, chain_store
from ..store.persistence import DatabasePersistence
from ..store.services import response_row


async def store_turn(
    principal: Principal,
    body: dict[str, Any],
    writer: MessagesWriter,
    *,
    model: str,
    upstream: str,
    latency_ms: int,
    cache_write_1h_tokens: int = 0,
) -> str:
    """Store this turn (its new messages and its answer); its response id. Raises
    InvalidRequest where a message has no item to store as (the caller keeps a usage record)."""
    messages = body["messages"]
    hashes = prefix_hashes(messages)
    system = hashlib.blake2b(json.dumps(body.get("system"), sort_keys=True).encode(), digest_size=16).digest()
    previous, start, previous_system = None, 0, b""
    # The longest prefix a stored turn was sent, followed by its answer (an assistant message):
    # every candidate asked at once, longest first.
    counts = [n for n in range(len(messages) - 1, 0, -1) if messages[n].get("role") == "assistant"]
    found = await chain_store().first(principal.tenant_id, [hashes[n - 1] for n in counts])
    if found is not None:
        previous, previous_system, start = found.response_id, found.system, found.messages + 1
    input_items = stored_input(body, start)
    response_id = new_id("resp")
    instructions = None if previous is not None and system == previous_system else _system(body)
    params: dict[str, Any] = {"model": model, "instructions": instructions, "metadata": {}, "store": True}
    row = response_row(
        response_id=response_id,
        tenant_id=principal.tenant_id,
        api_key_id=principal.key_id,
        previous_response_id=previous,
        model=model,
        params=params,
        created_at=datetime.now(UTC),
    )
    response = {
        "id": response_id,
        "object": "response",
        "status": "completed",
        "model": model,
        "output": output_items(writer),
        "usage": writer.usage.as_dict(),
        "completed_at": int(time.time()),
        "error": None,
        "incomplete_details": None,
    }
    persistence = DatabasePersistence(
        tenant_id=principal.tenant_id, input_items=input_items, store=True, create_row=row
    )
    await persistence.finish(
        response, upstream=upstream, latency_ms=latency_ms, cache_write_1h_tokens=cache_write_1h_tokens
    )
    if hashes:
        await chain_store().remember(principal.tenant_id, hashes[-1], Turn(response_id, len(messages), system))
    return response_id


def _system(body: dict[str, Any]) -> str | None:
    system = body.get("system")
    if isinstance(system, str):
        return system or None
    if isinstance(system, list):
        return "\n\n".join(b.get("text", "") for b in system if isinstance(b, dict)) or None
    return None
