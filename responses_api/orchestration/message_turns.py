"""Storing the turns of Anthropic's Messages front door (api/messages_views.py), linear in the
new messages (the rule: protocol/messages_api.py, "Storage rule").

Each stored turn remembers, in this process, the digest of the messages it was sent; a later
request whose messages begin with those (the same conversation, resent whole with the answer and
the next user turn appended) is stored as a response chained to it (`previous_response_id`) whose
input is only the messages after that prefix and its answer. A request no stored turn begins (a
new session, a compacted or edited history, another process served the last turn) starts a new
chain with all its messages. The system prompt is stored with a chain's first turn and again only
when it changes.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from ..domain import Principal
from ..protocol.ids import new_id
from ..protocol.messages_api import MessagesWriter, output_items, prefix_hashes, stored_input
from ..store.persistence import DatabasePersistence
from ..store.services import response_row
from ..ttlcache import TTLCache

# (tenant, digest of the messages a stored turn was sent) -> (its response id, how many
# messages, digest of its system prompt). An hour: a session idle longer starts a new chain.
_turns: TTLCache[tuple[int, bytes], tuple[str, int, bytes]] = TTLCache(
    lambda: float(getattr(settings, "GATEWAY_MESSAGES_CHAIN_SECONDS", 3600))
)


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
    # The longest prefix a stored turn was sent, followed by its answer (an assistant message).
    for count in range(len(messages) - 1, 0, -1):
        found = _turns.get((principal.tenant_id, hashes[count - 1]))
        if found is not None and messages[count].get("role") == "assistant":
            (previous, _, previous_system), start = found[0], count + 1
            break
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
        _turns.put((principal.tenant_id, hashes[-1]), (response_id, len(messages), system))
    return response_id


def _system(body: dict[str, Any]) -> str | None:
    system = body.get("system")
    if isinstance(system, str):
        return system or None
    if isinstance(system, list):
        return "\n\n".join(b.get("text", "") for b in system if isinstance(b, dict)) or None
    return None
