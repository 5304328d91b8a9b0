"""The scripted upstream (tests/support/upstream.py) as a standalone benchmark server.

Like `python -m tests.support.upstream`, every unknown model echoes, plus:

* model `slow`: a slow stream, `--slow-tokens` chunks of `--slow-chunk-chars`
  characters, one every `--slow-interval` seconds (Reply(interval=...));
  model `slow-N` (N an integer): the same with N chunks;
* `--echo-chunk-chars`: chunk size of echoed streaming replies;
* the list of recorded requests is emptied every few seconds (a benchmark
  sends far more requests than a test), and the process exits by itself
  after `--max-seconds`.

    python bench/upstream_server.py --port 8091 --latency 0.02
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.upstream import Reply, ScriptedUpstream


class BenchUpstream(ScriptedUpstream):
    """ScriptedUpstream that also answers `slow-N` models (N paced chunks)."""

    def __init__(self, *, slow_interval: float, slow_chunk_chars: int, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.slow_interval = slow_interval
        self.slow_chunk_chars = slow_chunk_chars
        self._slow: dict[str, Reply] = {}

    def slow_reply(self, tokens: int) -> Reply:
        words = "".join(f"t{i % 100:02d} " for i in range(tokens))  # 4 chars per token
        return Reply(
            text=words[: tokens * self.slow_chunk_chars], interval=self.slow_interval, chunk_chars=self.slow_chunk_chars
        )

    def _pick(self, model, body=None):  # type: ignore[no-untyped-def]
        if isinstance(model, str) and model.startswith("slow-") and model[5:].isdigit():
            reply = self._slow.get(model)
            if reply is None:
                reply = self._slow[model] = self.slow_reply(min(int(model[5:]), 100_000))
            return reply
        return super()._pick(model, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before every reply")
    parser.add_argument("--slow-interval", type=float, default=0.1)
    parser.add_argument("--slow-tokens", type=int, default=30)
    parser.add_argument("--slow-chunk-chars", type=int, default=4)
    parser.add_argument("--echo-chunk-chars", type=int, default=4)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    args = parser.parse_args()

    upstream = BenchUpstream(
        host=args.host,
        port=args.port,
        latency=args.latency,
        default_echo=True,
        slow_interval=args.slow_interval,
        slow_chunk_chars=args.slow_chunk_chars,
    )
    upstream.set_default("echo", Reply(echo=True, chunk_chars=args.echo_chunk_chars))
    upstream.set_default("slow", upstream.slow_reply(args.slow_tokens))
    # A tool loop that never ends by itself: every turn calls `step` (bench/websocket.py).
    upstream.set_default("toolcall", Reply(tool_calls=[{"id": "call_step", "name": "step", "arguments": {"n": 1}}]))

    stop = threading.Event()

    def housekeeping() -> None:
        # Bounded: one pass every 5 s for at most --max-seconds, then end the process.
        for _ in range(int(args.max_seconds // 5) + 1):
            if stop.wait(5):
                return
            with upstream._lock:
                upstream._requests.clear()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=housekeeping, daemon=True).start()
    try:
        upstream.run(log_level="warning")
    finally:
        stop.set()


if __name__ == "__main__":
    main()
