"""WebSocket tests over a Chat Completions and an Anthropic Messages upstream."""

from __future__ import annotations

import pytest

from tests.responses_api.test_anthropic import anthropic  # noqa: F401 - the fixture upstream_model uses
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import ScriptedUpstream


@pytest.fixture(params=["chat", "anthropic"])
def upstream_model(request: pytest.FixtureRequest, gateway: Gateway, scripted: ScriptedUpstream) -> tuple[str, str]:
    """(the model the client asks the gateway for, the upstream model the scripted server plays)."""
    if request.param == "chat":
        return MODEL, MODEL
    from tests.responses_api.test_anthropic import CLAUDE

    request.getfixturevalue("anthropic")  # the route CLAUDE -> a scripted Messages server
    return CLAUDE, "claude-up"
