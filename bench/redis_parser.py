"""What redis-py's reply parser and command packer cost the gateway's own round trips, side by
side in one run: the pure-Python RESP parser against hiredis's (the `redis[hiredis]` extra), then
hiredis's parser with hiredis's packer too (store/redis_clients.py: redis-py's asyncio connections
pack in Python), on the shapes the gateway sends (a run's event-log write, as the append script
takes it and as a pipeline, a poll's read of the running view, a worker's question about its
unseen runs, a web request's rate-limit read). Client CPU per round trip (process time), on the
same connection settings as the gateway's clients (RESP3), against a Redis server of the run's
own. The rest of a round trip (the server's work, the socket) is the same either way.

    .venv/bin/python bench/redis_parser.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import timeit
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


# The append script's arguments (store/eventlog.RedisEventLog.append_batch), not its work: the
# client's cost is in the arguments.
SCRIPT = "return #ARGV"


KEYS = [f"gw:{kind}:{{resp_bench}}" for kind in ("events", "view", "readers", "polled", "ended")]
ARGS: list[Any] = [
    10,
    *(part for n in range(10) for part in (f"{n + 1}-0", EVENT)),
    "set",
    b"7\n" + b"x" * 2000,
    20000,
    0,
    1,
]


def shapes(client: Any) -> dict[str, Callable[[], Awaitable[Any]]]:
    script = client.register_script(SCRIPT)
    keys, args = KEYS, ARGS

    async def append_script() -> None:  # a held batch as a worker writes it: one EVALSHA
        await script(keys=keys, args=args)

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
        "event-log write (the script: 10 events, the view)": append_script,
        "event-log write (10 XADD, SET, MGET)": write_batch,
        "unseen runs' marks (100 MGET)": unseen_runs,
        "poll's view (MGET of 2 KB)": poll_view,
        "rate-limit counters (HGETALL)": rate_limits,
    }


async def measure(url: str, parser: str, packer: str, rounds: int) -> dict[str, float]:
    from redis.asyncio import Redis

    from responses_api.store.redis_clients import _packing_in_c

    options: dict[str, Any] = {"protocol": 3}
    if parser == "python":
        from redis._parsers import _AsyncRESP3Parser

        options["parser_class"] = _AsyncRESP3Parser
    else:
        from redis._parsers import _AsyncHiredisParser

        options["parser_class"] = _AsyncHiredisParser
    client = Redis.from_url(url, **options)
    if packer == "hiredis":  # as the gateway's async clients pack
        client.connection_pool.connection_class = _packing_in_c(client.connection_pool.connection_class)
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
    configs = {"python": ("python", "python"), "hiredis": ("hiredis", "python"), "hiredis+pack": ("hiredis", "hiredis")}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    with server:
        # Each twice, the second time in the other order: the machine's speed changes by the minute.
        for order in (list(configs), list(configs)[::-1]):
            for name in order:
                runs[name].append(asyncio.run(measure(server.url, *configs[name], args.rounds)))
    print(f"{'client CPU per round trip (µs)':<50} {'python':>8} {'hiredis':>8} {'+pack':>8} {'ratio':>6} {'+pack':>6}")
    figures = {}
    for shape in runs["python"][0]:
        p, h, hp = ((one[0][shape] + one[1][shape]) / 2 for one in runs.values())
        figures[shape] = {
            "python_us": round(p, 1),
            "hiredis_us": round(h, 1),
            "hiredis_packing_us": round(hp, 1),
            "ratio": round(h / p, 2),
            "packing_ratio": round(hp / h, 2),
        }
        print(f"{shape:<50} {p:>8.1f} {h:>8.1f} {hp:>8.1f} {h / p:>6.2f} {hp / h:>6.2f}")
    # The packing alone, no I/O (what the round trips above cannot resolve on a shared machine):
    # the append script's EVALSHA as redis-py's asyncio connection packs it, and as the gateway's.
    from redis.asyncio.connection import Connection

    from responses_api.store.redis_clients import _packing_in_c

    command = ("EVALSHA", "0" * 40, len(KEYS), *KEYS, *ARGS)
    packing = {}
    for name, connection in (("python", Connection()), ("hiredis", _packing_in_c(Connection)())):
        packing[name] = (
            min(timeit.repeat(lambda c=connection: c.pack_command(*command), number=20000, repeat=5)) / 20000 * 1e6
        )
    print(
        f"packing the append script's call alone (µs): python {packing['python']:.1f}, hiredis {packing['hiredis']:.1f}"
    )
    figures["packing the append script's call (no I/O)"] = {
        "python_us": round(packing["python"], 1),
        "hiredis_packing_us": round(packing["hiredis"], 1),
        "packing_ratio": round(packing["hiredis"] / packing["python"], 2),
    }
    out = Path(__file__).parent / "results" / "redis_parser.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {out.relative_to(Path(__file__).resolve().parents[1])}")


if __name__ == "__main__":
    main()
