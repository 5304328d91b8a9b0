"""The compatibility suite: real agent clients against the real gateway.

Node clients come from `tests/compat/node_modules` (`npm ci` in this folder, which
`scripts/test` runs); Python clients from the `compat` extra. A client that is not
installed skips its tests, except under GATEWAY_REQUIRE_COMPAT=1 (set by
`scripts/test`, which installs them all), where it is a failure.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.responses_api.test_anthropic import anthropic  # noqa: F401 - the fixture upstream_model uses
from tests.support.harness import MODEL, Gateway
from tests.support.upstream import ScriptedUpstream

COMPAT_DIR = Path(__file__).resolve().parent
NODE_BIN = COMPAT_DIR / "node_modules" / ".bin"


def need(what: str, available: bool) -> None:
    if available:
        return
    message = f"{what} is not installed (scripts/test installs the compatibility clients)"
    if os.environ.get("GATEWAY_REQUIRE_COMPAT") == "1":
        pytest.fail(message)
    pytest.skip(message)


def node_tool(name: str) -> Path:
    path = NODE_BIN / name
    need(f"{name} (npm, tests/compat)", path.exists() and shutil.which("node") is not None)
    return path


@pytest.fixture(params=["chat", "anthropic"])
def upstream_model(request: pytest.FixtureRequest, gateway: Gateway, scripted: ScriptedUpstream) -> tuple[str, str]:
    """Each client over a Chat Completions and an Anthropic Messages upstream: (the model name
    the client asks the gateway for, the upstream model the scripted server plays)."""
    if request.param == "chat":
        return MODEL, MODEL
    from tests.responses_api.test_anthropic import CLAUDE

    request.getfixturevalue("anthropic")  # the route CLAUDE -> a scripted Messages server
    return CLAUDE, "claude-up"
