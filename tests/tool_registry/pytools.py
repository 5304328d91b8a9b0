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


async def stubborn(path: str, seconds: float) -> dict:
    """A tool that ignores cancellation: it runs until the file `path`.release appears (or
    `seconds` pass) whatever happens, noting in the file at `path` (read by a test in another
    process) when it started, each cancellation it ignored and when it returned."""
    import time
    from pathlib import Path

    note, release = Path(path), Path(path + ".release")
    with note.open("a") as f:
        f.write("started\n")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not release.exists():
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            with note.open("a") as f:
                f.write("cancel ignored\n")
    with note.open("a") as f:
        f.write("returned\n")
    return {"stubborn": "late result"}
