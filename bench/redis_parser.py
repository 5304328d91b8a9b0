"""What redis-py's reply parser costs the gateway's own round trips, side by side in one run:
the pure-Python RESP parser against hiredis's (the `redis[hiredis]` extra), on the shapes the
gateway sends (a run's event-log write, a poll's read of the running view, a worker's question
about its unseen runs, a web request's rate-limit read). Client CPU per round trip (process
time), on the same connection settings as the gateway's clients (RESP3), against a Redis server
of the run's own. The rest of a round trip (the server's work, the socket) is the same either way.

    .venv/bin/python bench/redis_parser.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EVENT = json.dumps(
    {
        "type": "response.output_text.delta",
        "sequence_number": 7,
        "output_index": 0,
        "content_index": 0,
        "item_id": "msg_0123456789abcdef",
        "delta": " token",
        "logprobs": [],
    }
).encode()


def shapes(client: Any) -> dict[str, Callable[[], Awaitable[Any]]]:
    async def write_batch() -> None:  # a held batch: ten events, the view, the watchers' marks
        pipe = client.pipeline(transaction=False)
        for _ in range(10):
            pipe.xadd("gw:events:{resp_bench}", {"e": EVENT}, maxlen=1000)
        pipe.set("gw:view:{resp_bench}", b"7\n" + b"x" * 2000, px=20000)
        pipe.mget("gw:readers:{resp_bench}", "gw:polled:{resp_bench}")
        await pipe.execute()

    async def unseen_runs() -> None:  # a worker asking about 100 unseen runs
        pipe = client.pipeline(transaction=False)
        for n in range(100):
            pipe.mget(f"gw:readers:{{resp_{n}}}", f"gw:polled:{{resp_{n}}}")
        await pipe.execute()

    async def poll_view() -> None:  # a poll's read of a running view (a 2 KB Response)
        await client.mget("gw:view:{resp_bench}", "gw:gone:{resp_bench}")

    async def rate_limits() -> None:  # a web request's counters
        await client.hgetall("gw:bench:limits")

    return {
        "event-log write (10 XADD, SET, MGET)": write_batch,
        "unseen runs' marks (100 MGET)": unseen_runs,
        "poll's view (MGET of 2 KB)": poll_view,
        "rate-limit counters (HGETALL)": rate_limits,
    }


async def measure(url: str, parser: str, rounds: int) -> dict[str, float]:
    from redis.asyncio import Redis

    options: dict[str, Any] = {"protocol": 3}
    if parser == "python":
        from redis._parsers import _AsyncRESP3Parser

        options["parser_class"] = _AsyncRESP3Parser
    else:
        from redis._parsers import _AsyncHiredisParser

        options["parser_class"] = _AsyncHiredisParser
    client = Redis.from_url(url, **options)
    await client.hset("gw:bench:limits", mapping={f"k{n}": n for n in range(8)})
    results = {}
    for name, call in shapes(client).items():
        for _ in range(20):
            await call()
        started = time.process_time()
        for _ in range(rounds):
            await call()
        results[name] = (time.process_time() - started) / rounds * 1e6
    await client.aclose()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2000)
    args = ap.parse_args()
    from redis.utils import HIREDIS_AVAILABLE

    if not HIREDIS_AVAILABLE:
        sys.exit("hiredis is not installed (pip install 'redis[hiredis]')")
    from tests.support.servers import start_redis

    server = start_redis(Path(tempfile.mkdtemp(prefix="bench-redis-parser-")))
    with server:
        python = asyncio.run(measure(server.url, "python", args.rounds))
        hiredis = asyncio.run(measure(server.url, "hiredis", args.rounds))
        # Once more each, in the other order: the machine's speed changes by the minute.
        hiredis2 = asyncio.run(measure(server.url, "hiredis", args.rounds))
        python2 = asyncio.run(measure(server.url, "python", args.rounds))
    print(f"{'client CPU per round trip (µs)':<40} {'python':>9} {'hiredis':>9} {'ratio':>7}")
    figures = {}
    for name in python:
        p, h = (python[name] + python2[name]) / 2, (hiredis[name] + hiredis2[name]) / 2
        figures[name] = {"python_us": round(p, 1), "hiredis_us": round(h, 1), "ratio": round(h / p, 2)}
        print(f"{name:<40} {p:>9.1f} {h:>9.1f} {h / p:>7.2f}")
    out = Path(__file__).parent / "results" / "redis_parser.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {out.relative_to(Path(__file__).resolve().parents[1])}")


if __name__ == "__main__":
    main()
