"""Does a worker's event loop pay for living on a thread? aiohttp reading slow streams, two ways.

Not a gateway benchmark: it tests one explanation of why a background run's token costs the
worker more than a relayed token costs a web process (bench/README.md, "Eighteenth session").
A web process runs its loop on its main thread and nothing else; a worker (responses_api/tasks.py)
runs its loop on a thread of its own, beside Celery's consumer on the main thread and the threads
pool's threads, each waiting on a run's future. uvloop releases the GIL while it polls and takes it
again for every callback, so other threads could tax each token. Here the same client, `--streams`
aiohttp streams of the lean upstream's `slow-N` tokens (one every `--interval` s), read chunk by
chunk, runs

- `main`: its loop on the main thread, no other thread (a web process);
- `thread`: its loop on a thread, `--idle-threads` threads blocked on futures of that loop (the
  threads pool's), the main thread waking from `epoll` every second (a consumer between tasks);

each in a fresh interpreter, alternating, `--rounds` times; per run the loop thread's CPU
(`time.thread_time`) over the chunks it read in a `--seconds` window after a warm-up.

    .venv/bin/python bench/loop_thread.py [--streams 100] [--interval 1.0] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c


async def _read_streams(base_url: str, streams: int, tokens: int, seconds: float) -> dict[str, float]:
    import aiohttp

    chunks = 0

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal chunks
        body = {"model": f"slow-{tokens}", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        async with session.post(f"{base_url}/chat/completions", json=body) as response:
            while await response.content.readany():
                chunks += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.ensure_future(one(session)) for _ in range(streams)]
        await asyncio.sleep(3.0)  # every stream open and past its first chunk
        chunks_before, cpu_before = chunks, time.thread_time()
        await asyncio.sleep(seconds)
        read, cpu = chunks - chunks_before, time.thread_time() - cpu_before
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"chunks": read, "us_per_chunk": cpu / max(read, 1) * 1e6}


def _child(mode: str, base_url: str, streams: int, tokens: int, seconds: float, idle_threads: int) -> None:
    import uvloop

    work = _read_streams(base_url, streams, tokens, seconds)
    if mode == "main":
        print(json.dumps(uvloop.run(work)), flush=True)
        return
    loop = uvloop.new_event_loop()
    threading.Thread(target=loop.run_forever, name="loop", daemon=True).start()
    pool = concurrent.futures.ThreadPoolExecutor(idle_threads)
    for _ in range(idle_threads):  # as the threads pool's threads wait on their runs
        pool.submit(asyncio.run_coroutine_threadsafe(asyncio.sleep(3600), loop).result)
    done = asyncio.run_coroutine_threadsafe(work, loop)
    poller = select.epoll()
    while not done.done():  # as Celery's consumer between tasks
        poller.poll(1.0)
    print(json.dumps(done.result()), flush=True)
    os._exit(0)  # the idle threads wait an hour


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between a stream's tokens")
    ap.add_argument("--seconds", type=float, default=20.0, help="the measured window")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-threads", type=int, default=120)
    ap.add_argument("--child", nargs=2, metavar=("MODE", "BASE_URL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    tokens = int((args.seconds + 10) / args.interval) + 10  # every stream outlasts the window
    if args.child:
        _child(args.child[0], args.child[1], args.streams, tokens, args.seconds, args.idle_threads)
        return
    log_dir = Path(tempfile.mkdtemp(prefix="loop-thread-"))
    upstream = c.LeanUpstream(log_dir=log_dir, interval=args.interval)
    figures: dict[str, list[float]] = {"main": [], "thread": []}
    try:
        for i in range(args.rounds):
            for mode in ("main", "thread") if i % 2 == 0 else ("thread", "main"):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", mode, upstream.base_url, *_passed(args)],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                one = json.loads(out.stdout.strip().splitlines()[-1])
                figures[mode].append(one["us_per_chunk"])
                c.log(f"round {i + 1} {mode}: {one['us_per_chunk']:.1f} us per chunk ({one['chunks']} chunks)")
    finally:
        upstream.stop()
    result = {
        "streams": args.streams,
        "interval": args.interval,
        "idle_threads": args.idle_threads,
        "us_per_chunk": figures,
        "median": {mode: statistics.median(values) for mode, values in figures.items()},
    }
    c.log(f"median us per chunk: main {result['median']['main']:.1f}, thread {result['median']['thread']:.1f}")
    c.write_result("loop-thread", result)


def _passed(args: argparse.Namespace) -> list[str]:
    return [
        f"--streams={args.streams}",
        f"--interval={args.interval}",
        f"--seconds={args.seconds}",
        f"--idle-threads={args.idle_threads}",
    ]


if __name__ == "__main__":
    main()
