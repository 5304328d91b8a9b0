"""What a background response costs, side by side with another commit's gateway in one run (issue 55).

Each target (this tree, and with `--baseline REV` that commit's files) runs as compose runs it:
two web processes (`uvicorn --workers 2`), a Celery worker (prefork, `--worker-concurrency`), a
Redis of its own (its commands are counted apart) and a database of its own on one PostgreSQL.
The upstream is slow (bench/lean_upstream.py: `--tokens` tokens, one every `--interval` s).
Phases, each run for every target in turn (the other target idle), net of an idle baseline:

- fg: stored streamed foreground creates of the answer, read to the end: web + PostgreSQL +
  Redis CPU per create (the yardstick).
- bg: background creates, no polls, then one retrieve once the run should be over (retrieved
  again, counted, if it was not): web + worker + PostgreSQL + Redis CPU per response, PostgreSQL
  transactions and Redis commands per response. Target: at most 2x fg.
- poll: polls of running background responses whose output does not change between polls (a
  long run between two tokens), against authenticated `GET /v1/models`, same count and
  concurrency: web CPU per request (target: poll at most 1.5x), PostgreSQL transactions per
  poll (the runs' heartbeats included: they are few).
- readers: `--readers` concurrent readers resuming running background streams
  (`GET /v1/responses/{id}?stream=true&starting_after=N`, N random in 0..4) spread over
  `--reader-responses` runs: how many got every event after N once, in order, and the terminal one.

The fg and bg phases' clients start evenly over one token interval (`--arrivals spread`), as
independent clients' requests do: started all at once (`--arrivals together`, before 2026-11-30),
the foreground streams' tokens arrived in lockstep, a web process relaying dozens of them per
wakeup at about a third of the CPU per token of tokens arriving apart (bench/README.md,
"Nineteenth session"), while the worker, starting its runs one after another, got them apart
either way: the ratio set a flattered yardstick against a cost measured as it is.

With `--rounds N` the fg and bg phases run N times per target (fg first in odd rounds, bg first in
even ones; the idle baseline measured again before each round): the summary gives each round's
figures, the ratio of each round's bg to its own fg, and their median, which the machine's drift
between rounds does not move as it moves one run's figures.

    .venv/bin/python bench/background.py --baseline f29271a [--runs 40] [--readers 1000] [--rounds 5]

Results: bench/results/background.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c
from capacity import Counters, Meter

TERMINAL = {"response.completed", "response.failed", "response.incomplete"}


@dataclass
class Target:
    name: str
    gw: c.Gateway
    worker: c.Proc
    redis: Any
    meter: Meter

    @property
    def v1(self) -> str:
        return f"{self.gw.url}/v1"


def body(model: str, **extra: Any) -> bytes:
    return json.dumps({"model": model, "input": "Say something slowly.", **extra}).encode()


def first_start(i: int, concurrency: int, spread: float) -> float:
    """Seconds client `i` waits before its first create: the clients start evenly over `spread`
    seconds (0: all at once). A client's next create follows its last one, so they stay spread."""
    return i * spread / concurrency


async def fg_phase(t: Target, *, runs: int, concurrency: int, spread: float = 0.0) -> int:
    """Stored streamed creates, each read to its end."""
    queue = list(range(runs))
    done = 0

    async def client(i: int) -> None:
        nonlocal done
        await asyncio.sleep(first_start(i, concurrency, spread))
        cl = c.RawHttp(t.v1, t.gw.headers)
        try:
            while queue:
                queue.pop()
                res = await cl.request("POST", "/responses", body("answer", stream=True), sse=True, timeout=300)
                if not res.ok:
                    raise RuntimeError(f"{t.name}: streamed create failed: {res.status} {res.error}")
                done += 1
        finally:
            cl.close()

    await asyncio.gather(*(client(i) for i in range(concurrency)))
    return done


async def bg_phase(t: Target, *, runs: int, concurrency: int, expected: float, spread: float = 0.0) -> dict[str, Any]:
    """Background creates, no polls; one retrieve once the run should be over (again if it was not)."""
    queue = list(range(runs))
    completed = extra = 0

    async def client(i: int) -> None:
        nonlocal completed, extra
        await asyncio.sleep(first_start(i, concurrency, spread))
        cl = c.RawHttp(t.v1, t.gw.headers)
        try:
            while queue:
                queue.pop()
                res = await cl.request("POST", "/responses", body("answer", background=True), keep_body=True)
                if not res.ok or res.body is None:
                    raise RuntimeError(f"{t.name}: background create failed: {res.status} {res.body!r:.300}")
                rid = json.loads(res.body)["id"]
                cl.close()  # no connection held while the run goes on
                await asyncio.sleep(expected)
                for _ in range(600):
                    got = await cl.request("GET", f"/responses/{rid}", keep_body=True)
                    status = json.loads(got.body or b"{}").get("status")
                    if status == "completed":
                        completed += 1
                        break
                    if status not in ("queued", "in_progress"):
                        raise RuntimeError(f"{t.name}: {rid} ended {status}: {got.body!r:.300}")
                    extra += 1
                    await asyncio.sleep(0.5)
                cl.close()
        finally:
            cl.close()

    await asyncio.gather(*(client(i) for i in range(concurrency)))
    return {"completed": completed, "extra_retrieves": extra}


async def start_running(t: Target, model: str, n: int, *, wait_output: bool) -> list[str]:
    cl = c.RawHttp(t.v1, t.gw.headers)
    ids = []
    try:
        for _ in range(n):
            res = await cl.request("POST", "/responses", body(model, background=True), keep_body=True)
            if not res.ok or res.body is None:
                raise RuntimeError(f"{t.name}: background create failed: {res.status} {res.body!r:.300}")
            ids.append(json.loads(res.body)["id"])
        deadline = time.monotonic() + 120
        for rid in ids:  # each in progress (with output so far, if asked)
            while True:
                got = json.loads((await cl.request("GET", f"/responses/{rid}", keep_body=True)).body or b"{}")
                if got.get("status") == "in_progress" and (got.get("output") or not wait_output):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{t.name}: {rid} not running with output after 120 s: {got.get('status')}")
                await asyncio.sleep(0.2)
    finally:
        cl.close()
    return ids


async def get_many(t: Target, paths: list[str], concurrency: int) -> int:
    queue = list(paths)
    done = 0

    async def client() -> None:
        nonlocal done
        cl = c.RawHttp(t.v1, t.gw.headers)
        try:
            while queue:
                res = await cl.request("GET", queue.pop())
                if not res.ok:
                    raise RuntimeError(f"{t.name}: GET failed: {res.status} {res.error}")
                done += 1
        finally:
            cl.close()

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return done


async def cancel_all(t: Target, ids: list[str]) -> None:
    cl = c.RawHttp(t.v1, t.gw.headers)
    try:
        for rid in ids:
            await cl.request("POST", f"/responses/{rid}/cancel", b"{}", timeout=30)
    finally:
        cl.close()


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for part in raw.split(b"\n\n"):
        for line in part.split(b"\n"):
            if line.startswith(b"data: {"):
                out.append(json.loads(line[6:]))
    return out


async def readers_phase(t: Target, *, readers: int, responses: int) -> dict[str, Any]:
    ids = await start_running(t, "readers", responses, wait_output=True)
    rng = random.Random(55)
    plan = [(ids[i % len(ids)], rng.randint(0, 4)) for i in range(readers)]

    async def read(rid: str, after: int) -> str:
        cl = c.RawHttp(t.v1, t.gw.headers)
        try:
            res = await cl.request(
                "GET", f"/responses/{rid}?stream=true&starting_after={after}", sse=True, keep_body=True, timeout=600
            )
        finally:
            cl.close()
        if not res.ok or res.body is None:
            return f"http {res.status} {res.error}"
        events = sse_events(res.body)
        numbers = [e["sequence_number"] for e in events]
        if numbers != list(range(after + 1, after + 1 + len(numbers))):
            return "gap, duplicate or disorder"
        if not events or events[-1]["type"] not in TERMINAL:
            return "no terminal event"
        return "ok"

    started = time.monotonic()
    outcomes = await asyncio.gather(*(read(rid, after) for rid, after in plan))
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    return {
        "readers": readers,
        "responses": responses,
        "outcomes": counts,
        "seconds": round(time.monotonic() - started, 1),
    }


def ms(ph: dict[str, Any], *names: str) -> float:
    return round(sum(ph.get(f"{n}_ms_per_request", 0.0) for n in names), 3)


def median_round(rounds: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    """The round whose `phase` costs the median CPU per request (the lower of two middles): its figures
    stay one measurement's, each part and count consistent with the others."""
    ranked = sorted(rounds, key=lambda one: ms(one[phase], "web", "worker", "postgres", "redis"))
    return ranked[(len(ranked) - 1) // 2][phase]


def start_postgres(d: Path, *, max_connections: int) -> Any:
    """The benchmark's PostgreSQL, with room for its gateways' web and worker pools."""
    pg = c.start_postgres(d)
    import psycopg

    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET max_connections = {max_connections}")
    pg.halt()
    pg.resume()
    return pg


def start_gateway(
    d: Path, pg_url: str, name: str, config: dict[str, Any], worker_concurrency: int, tree: Path | None = None
) -> tuple[c.Gateway, c.Proc, Any, str]:
    """A gateway as compose runs it: two web processes, a Celery worker with `worker_concurrency`
    pool threads, a Redis and a database of its own; the files of `tree` (default: this one)."""
    from tests.support.servers import start_redis

    rds = start_redis(d / name)
    db_url = c.create_database(pg_url, f"bench_{name}")
    extra = {"REDIS_URL": rds.url, "GATEWAY_UPSTREAM_MAX_CONNECTIONS": "4000", "DB_POOL_MIN_SIZE": "1"}
    gw = c.Gateway(
        db_url=db_url,
        providers={},
        models={},
        log_dir=d,
        name=name,
        config=config,
        extra_env=extra,
        uvicorn_args=["--workers", "2"],
        tree=tree,
    )
    cmd = [c.PYTHON, "-m", "celery", "-A", "project", "worker", "--loglevel=WARNING"]
    cmd += [f"--concurrency={worker_concurrency}", "--without-gossip", "--without-mingle", "-n", f"{name}@%h"]
    worker = c.Proc(f"{name}-worker", cmd, env=gw.env, log_dir=d, cwd=tree)
    return gw, worker, rds, db_url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", metavar="REV", help="also run the gateway of git commit REV, side by side")
    ap.add_argument("--runs", type=int, default=40, help="responses per fg and bg phase")
    ap.add_argument("--concurrency", type=int, default=10, help="creates in flight (fg, bg)")
    ap.add_argument("--tokens", type=int, default=20, help="tokens of the answer")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between the upstream's tokens")
    ap.add_argument("--polls", type=int, default=2000, help="polls (and GET /v1/models) in the poll phase")
    ap.add_argument("--poll-concurrency", type=int, default=8)
    ap.add_argument("--poll-runs", type=int, default=8, help="running responses polled")
    ap.add_argument("--readers", type=int, default=1000)
    ap.add_argument("--reader-responses", type=int, default=10)
    ap.add_argument("--reader-tokens", type=int, default=60, help="tokens of a readers-phase run")
    ap.add_argument(
        "--worker-concurrency", type=int, default=12, help="the worker's pool threads (runs it holds at once)"
    )
    ap.add_argument(
        "--idle", type=float, default=30.0, help="seconds of idle CPU measured first (subtracted; CPU ticks are 10 ms)"
    )
    ap.add_argument(
        "--arrivals",
        choices=("spread", "together"),
        default="spread",
        help="spread: the fg and bg phases' clients start evenly over one token interval, so the streams'"
        " tokens arrive spread as independent clients' do; together: all at once (before 2026-11-30), so"
        " the foreground streams' tokens arrive in lockstep, many per wakeup of a web process, where the"
        " worker, starting its runs one after another, never gets them so (bench/README.md, nineteenth session)",
    )
    ap.add_argument("--skip", default="", help="phases to skip (comma-separated: fg,bg,poll,readers)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="fg and bg phases this many times per target, alternating which goes first, the idle baseline"
        " measured again before each round; the summary gives medians (of the ratio: of each round's own)",
    )
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    c.raise_nofile()
    c.use_uvloop()
    d = c.run_dir("background")
    pg = start_postgres(d, max_connections=400)  # two targets' workers and web pools
    lean = c.LeanUpstream(log_dir=d, name="lean-upstream", interval=args.interval)
    config = {
        "providers": [{"name": "lean", "kind": "chat_completions", "base_url": lean.base_url}],
        "models": [
            {"name": "answer", "targets": [{"provider": "lean", "model": f"slow-{args.tokens}"}]},
            {"name": "long", "targets": [{"provider": "lean", "model": "slow-100000"}]},
            {"name": "readers", "targets": [{"provider": "lean", "model": f"slow-{args.reader_tokens}"}]},
        ],
    }
    trees: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline:
        trees.insert(0, ("baseline", c.source_tree(args.baseline, d / "baseline-tree")))
    targets: list[Target] = []
    for name, tree in trees:
        gw, worker, rds, db_url = start_gateway(d, pg.url, name, config, args.worker_concurrency, tree)
        pids = {"web": gw.proc.pid, "worker": worker.pid, "postgres": pg.pid, "redis": rds.pid}
        targets.append(Target(name, gw, worker, rds, Meter(pids, Counters(db_url, rds.url))))
    time.sleep(5)  # web processes and worker pools up
    expected = args.tokens * args.interval + 1.0
    for t in targets:
        c.log(f"{t.name}: warm-up")
        asyncio.run(fg_phase(t, runs=4, concurrency=4))
        asyncio.run(bg_phase(t, runs=min(args.worker_concurrency, 8), concurrency=8, expected=expected))
    for t in targets:
        c.log(f"{t.name}: idle {t.meter.idle(args.idle)}")

    results: dict[str, dict[str, Any]] = {t.name: {} for t in targets}
    order = list(targets)

    spread = args.interval if args.arrivals == "spread" else 0.0

    def measure(t: Target, phase: str) -> dict[str, Any]:
        t.meter.start()
        if phase == "fg":
            return t.meter.stop(asyncio.run(fg_phase(t, runs=args.runs, concurrency=args.concurrency, spread=spread)))
        out = asyncio.run(bg_phase(t, runs=args.runs, concurrency=args.concurrency, expected=expected, spread=spread))
        return t.meter.stop(out["completed"]) | out

    # The yardstick drifts with the shared machine's load by the hour (4.6 to 9.2 ms for one tree in
    # two runs): several rounds, each a fg and a bg phase back to back, give a ratio per round.
    pair = [p for p in ("fg", "bg") if p not in skip]
    for i in range(args.rounds if pair else 0):
        for t in order:
            r = results[t.name]
            if i:
                c.log(f"{t.name}: round {i + 1}: idle {t.meter.idle(args.idle)}")
            one = {"idle_cores": dict(t.meter.idle_cores)}
            for phase in pair if i % 2 == 0 else pair[::-1]:
                c.log(f"{t.name}: round {i + 1}: phase {phase}")
                one[phase] = measure(t, phase)
                c.log(f"{t.name}: {phase}: {json.dumps(one[phase])[:1500]}")
            r.setdefault("rounds", []).append(one)
        order.reverse()  # neither target always goes first
    for t in targets:
        r = results[t.name]
        for phase in pair:
            r[phase] = median_round(r["rounds"], phase)

    for phase in ("poll", "readers"):
        if phase in skip:
            continue
        for t in order:
            r = results[t.name]
            c.log(f"{t.name}: phase {phase}")
            if phase == "poll":
                ids = asyncio.run(start_running(t, "long", args.poll_runs, wait_output=True))
                time.sleep(1.0)
                paths = [f"/responses/{ids[i % len(ids)]}" for i in range(args.polls)]
                t.meter.start()
                n = asyncio.run(get_many(t, paths, args.poll_concurrency))
                r["poll"] = t.meter.stop(n)
                t.meter.start()
                n = asyncio.run(get_many(t, ["/models"] * args.polls, args.poll_concurrency))
                r["models"] = t.meter.stop(n)
                asyncio.run(cancel_all(t, ids))
            else:
                try:
                    r["readers"] = asyncio.run(readers_phase(t, readers=args.readers, responses=args.reader_responses))
                except RuntimeError as exc:  # the other figures stand
                    r["readers"] = {"error": str(exc)[:300]}
            c.log(f"{t.name}: {phase}: {json.dumps(r.get(phase))[:1500]}")
        order.reverse()  # neither target always goes first

    lines = []
    for t in targets:
        r = results[t.name]
        row: dict[str, Any] = {}
        if "fg" in r:
            row["fg_ms"] = ms(r["fg"], "web", "worker", "postgres", "redis")
        if len(r.get("rounds", ())) > 1:
            rounds = [
                {p: ms(one[p], "web", "worker", "postgres", "redis") for p in ("fg", "bg") if p in one}
                for one in r["rounds"]
            ]
            row["rounds_ms"] = rounds
            if all("fg" in x and "bg" in x and x["fg"] for x in rounds):
                row["bg_over_fg_rounds"] = [round(x["bg"] / x["fg"], 2) for x in rounds]
        if "bg" in r:
            bg = r["bg"]
            row["bg_ms"] = ms(bg, "web", "worker", "postgres", "redis")
            row["bg_parts_ms"] = {n: ms(bg, n) for n in ("web", "worker", "postgres", "redis")}
            row["bg_pg_transactions"] = bg.get("pg_xact_per_request")
            row["bg_redis_commands"] = bg.get("redis_commands_per_request")
            row["bg_redis_calls"] = bg.get("redis_calls_per_request")
            row["bg_extra_retrieves"] = bg.get("extra_retrieves")
            if "bg_over_fg_rounds" in row:
                row["bg_over_fg"] = round(statistics.median(row["bg_over_fg_rounds"]), 2)
            elif "fg" in r and row["fg_ms"]:
                row["bg_over_fg"] = round(row["bg_ms"] / row["fg_ms"], 2)
        if "poll" in r:
            row["poll_web_ms"] = ms(r["poll"], "web")
            row["models_web_ms"] = ms(r["models"], "web")
            row["poll_over_models"] = round(row["poll_web_ms"] / max(1e-9, row["models_web_ms"]), 2)
            row["poll_pg_transactions"] = r["poll"].get("pg_xact_per_request")
            row["poll_redis_commands"] = r["poll"].get("redis_commands_per_request")
        if "readers" in r:
            row["readers"] = r["readers"]
        r["summary"] = row
        lines.append(f"{t.name}: {json.dumps(row)}")
    for line in lines:
        print(line, flush=True)
    c.write_result("background", {"args": vars(args), "results": results})
    for t in targets:
        t.meter.counters.pg.close()
        t.worker.stop()
        t.gw.stop()
        t.redis.stop()
    lean.stop()
    pg.stop()


if __name__ == "__main__":
    main()
