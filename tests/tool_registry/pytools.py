"""Python tools used by the tests (allowlisted via GATEWAY_PYTHON_TOOL_MODULES in tests)."""

from __future__ import annotations

import asyncio


def add(a: int, b: int) -> dict:
    return {"sum": a + b}


async def slow_echo(text: str) -> str:
    await asyncio.sleep(0.01)
    return text.upper()


def explode() -> None:
    raise RuntimeError("kaboom")
