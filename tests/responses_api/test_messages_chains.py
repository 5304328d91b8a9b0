"""The Messages front door's turns chain whichever web process serves them: the turns it
remembers are in Redis (store/message_chains.py), not in one process's memory (README's
compose file runs two web processes; a session spread over them restarted its chain, storing
the whole conversation again, at every switch)."""

from __future__ import annotations

from typing import Any

from tests.responses_api.test_messages_api import client, routes  # noqa: F401  (the fixture)
from tests.support.harness import Gateway
from tests.support.upstream import Reply, ScriptedUpstream


def test_a_session_chains_across_web_processes(routes: Gateway, scripted: ScriptedUpstream) -> None:  # noqa: F811
    from responses_api import ttlcache
    from responses_api.models import Item, Response
    from responses_api.store import message_chains

    scripted.set_responder("up-chat_completions", lambda body: Reply(text=f"answer {len(body['messages'])}"))
    claude = client(routes)
    messages: list[dict[str, Any]] = []
    for turn in range(4):
        messages.append({"role": "user", "content": f"question {turn}"})
        answer = claude.messages.create(model="via-chat", max_tokens=20, messages=messages)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]})
        # The next turn lands on another process: nothing of this one's memory is there.
        ttlcache.clear_all()
        message_chains.chain_store.reset()
    responses = list(Response.objects.filter(tenant_id=routes.tenant_id).order_by("created_at"))
    assert len(responses) == 4
    assert [r.previous_response_id for r in responses] == [None] + [r.id for r in responses[:-1]]
    assert Item.objects.filter(tenant_id=routes.tenant_id).count() == len(messages)
