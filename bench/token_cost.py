"""CPU per relayed token in a steady window: the web's stream relay against the worker's run (issue 55).

One gateway of this tree as compose runs it (two web processes, a Celery worker with
`--worker-concurrency` pool threads, Redis and PostgreSQL of its own) and a slow upstream
(bench/lean_upstream.py: 60 tokens, one every `--interval` s). Each phase holds `--streams`
responses open and measures, once they all stream and none starts or ends, the CPU each process
spends over `--seconds` (the kernel's per-thread run time, /proc/<pid>/task/<tid>/schedstat, in
nanoseconds: a 10 ms tick would be too coarse), net of the same processes idle, per token relayed:

- fg-together: stored streamed foreground creates, all started at once: the streams' tokens arrive
  in lockstep (bench/background.py before `--arrivals`);
- fg-spread: the same, started evenly over one token interval, as independent clients' are;
- bg: background runs, created evenly over one interval (the worker starts them one after
  another anyway): the worker's CPU per token, and its event-loop thread's alone.

    .venv/bin/python bench/token_cost.py [--streams 100] [--seconds 30] [--rounds 2]

Results: bench/results/token_cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c
from background import Target, body, first_start, start_gateway, start_postgres

TOKENS = 60


def thread_ns(pid: int) -> dict[tuple[int, int], int]:
    """Run time (ns) of every thread of `pid` and its descendants."""
    out = {}
    for p in c.tree_pids(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat") as fh:
                    out[(p, int(tid))] = int(fh.read().split()[0])
            except OSError:
                continue
    return out


class Window:
    """Per-thread run time of some processes between `start` and `stop`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids

    def start(self) -> None:
        self.before = {name: thread_ns(pid) for name, pid in self.pids.items()}
        self.t0 = time.monotonic()

    def stop(self) -> dict[str, Any]:
        after = {name: thread_ns(pid) for name, pid in self.pids.items()}
        seconds = time.monotonic() - self.t0
        out: dict[str, Any] = {"seconds": seconds}
        for name in self.pids:
            deltas = [ns - self.before[name].get(key, ns) for key, ns in after[name].items()]
            out[name] = sum(deltas) / 1e9
            out[f"{name}_busiest_thread"] = max(deltas, default=0) / 1e9
        return out


async def fg_streams(t: Target, n: int, spread: float, window: Window, settle: float, seconds: float) -> dict[str, Any]:
    async def one(i: int) -> None:
        await asyncio.sleep(first_start(i, n, spread))
        cl = c.RawHttp(t.v1, t.gw.headers)
        try:
            res = await cl.request("POST", "/responses", body("answer", stream=True), sse=True, timeout=600)
            if not res.ok:
                raise RuntimeError(f"streamed create failed: {res.status} {res.error}")
        finally:
            cl.close()

    tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
    await asyncio.sleep(settle)
    window.start()
    await asyncio.sleep(seconds)
    got = window.stop()
    await asyncio.gather(*tasks)
    return got


async def bg_runs(t: Target, n: int, spread: float, window: Window, settle: float, seconds: float) -> dict[str, Any]:
    ids: list[str] = []

    async def one(i: int) -> None:
        await asyncio.sleep(first_start(i, n, spread))
        cl = c.RawHttp(t.v1, t.gw.headers)
        try:
            res = await cl.request("POST", "/responses", body("answer", background=True), keep_body=True)
            if not res.ok or res.body is None:
                raise RuntimeError(f"background create failed: {res.status} {res.body!r:.300}")
            ids.append(json.loads(res.body)["id"])
        finally:
            cl.close()

    await asyncio.gather(*(one(i) for i in range(n)))
    await asyncio.sleep(settle)
    window.start()
    await asyncio.sleep(seconds)
    got = window.stop()
    cl = c.RawHttp(t.v1, t.gw.headers)
    try:
        for rid in ids:  # each to its end before the next phase
            for _ in range(600):
                res = await cl.request("GET", f"/responses/{rid}", keep_body=True)
                if json.loads(res.body or b"{}").get("status") not in ("queued", "in_progress"):
                    break
                await asyncio.sleep(1.0)
    finally:
        cl.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=100, help="responses open at once in each phase")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between the upstream's tokens")
    ap.add_argument("--settle", type=float, default=12.0, help="seconds after the starts before the window")
    ap.add_argument("--seconds", type=float, default=30.0, help="the window (it must end before the streams)")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of idle measured before each round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--worker-concurrency", type=int, default=120)
    args = ap.parse_args()
    if args.settle + args.seconds + args.interval * 2 > TOKENS * args.interval:
        ap.error("--settle + --seconds must end well before the streams do (60 tokens)")
    c.raise_nofile()
    c.use_uvloop()
    d = c.run_dir("token_cost")
    pg = start_postgres(d, max_connections=300)
    lean = c.LeanUpstream(log_dir=d, name="lean-upstream", interval=args.interval)
    config = {
        "providers": [{"name": "lean", "kind": "chat_completions", "base_url": lean.base_url}],
        "models": [{"name": "answer", "targets": [{"provider": "lean", "model": f"slow-{TOKENS}"}]}],
    }
    gw, worker, rds, _ = start_gateway(d, pg.url, "this", config, args.worker_concurrency)
    t = Target("this", gw, worker, rds, None)  # type: ignore[arg-type]  # no Meter: the windows measure
    window = Window({"web": gw.proc.pid, "worker": worker.pid, "redis": rds.pid, "postgres": pg.pid})
    time.sleep(5)
    c.log("warm-up")
    asyncio.run(fg_streams(t, 4, 0.0, Window({}), 1.0, 0.1))
    asyncio.run(bg_runs(t, 4, 0.0, Window({}), 1.0, 0.1))

    phases = {
        "fg-together": lambda: fg_streams(t, args.streams, 0.0, window, args.settle, args.seconds),
        "fg-spread": lambda: fg_streams(t, args.streams, args.interval, window, args.settle, args.seconds),
        "bg": lambda: bg_runs(t, args.streams, args.interval, window, args.settle, args.seconds),
    }
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        window.start()
        time.sleep(args.idle)
        idle = window.stop()
        one: dict[str, Any] = {"idle": idle}
        order = list(phases) if r % 2 == 0 else list(phases)[::-1]
        for name in order:
            c.log(f"round {r + 1}: {name}")
            got = asyncio.run(phases[name]())
            tokens = args.streams * got["seconds"] / args.interval
            row: dict[str, Any] = {"tokens": round(tokens)}
            for part in ("web", "worker", "redis", "postgres"):
                net = got[part] - idle[part] * got["seconds"] / idle["seconds"]
                row[f"{part}_us_per_token"] = round(net * 1e6 / tokens, 1)
            row["worker_loop_thread_us_per_token"] = round(got["worker_busiest_thread"] * 1e6 / tokens, 1)
            one[name] = row
            c.log(f"round {r + 1}: {name}: {json.dumps(row)}")
        rounds.append(one)

    def median(phase: str, part: str) -> float:
        return round(statistics.median(one[phase][f"{part}_us_per_token"] for one in rounds), 1)

    summary = {
        "fg_together_web_us_per_token": median("fg-together", "web"),
        "fg_spread_web_us_per_token": median("fg-spread", "web"),
        "bg_worker_us_per_token": median("bg", "worker"),
        "bg_worker_loop_thread_us_per_token": median("bg", "worker_loop_thread"),
        "bg_redis_us_per_token": median("bg", "redis"),
    }
    print(json.dumps(summary), flush=True)
    c.write_result("token_cost", {"args": vars(args), "rounds": rounds, "summary": summary})
    worker.stop()
    gw.stop()
    rds.stop()
    lean.stop()
    pg.stop()


if __name__ == "__main__":
    main()
