"""Capacity on paper: what one production-like machine does per request, and what 1,000, 10,000 and
100,000 requests per second and 100,000 concurrent streams would need.

One configuration, as compose runs it: two web processes (`uvicorn --workers 2`), one PostgreSQL,
Redis (REDIS_URL: tenant and key rate limits and a budget that never bind, so every request is
counted; the event logs; Celery's broker) and one Celery worker. Phases, in this order: (e)
--streams slow streams held open (bench/lean_upstream.py, a token every 100 ms): web CPU and RSS
per open stream; at --concurrency: (a) stored non-streaming, (b) stored streamed and (c)
`store: false` creates; (d) background creates polled to completion: worker CPU per response.

Per phase, net of an idle baseline: req/s; CPU ms per request of the web tree, the worker tree,
PostgreSQL and Redis; PostgreSQL transactions, rows written and WAL bytes; Redis commands (Lua
scripts' inner calls included). Then the capacity table (markdown), linear in those figures.
Results: bench/results/capacity.json.

    .venv/bin/python bench/capacity.py [--duration 5] [--streams 500] [--hold 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c

PROMPT = "Say hello to the benchmark."
DELTA = b"response.output_text.delta"
SCALES = (1_000, 10_000, 100_000)


class Counters:
    """Work the database and Redis did between two snapshots (cumulative server counters)."""

    def __init__(self, pg_url: str, redis_url: str) -> None:
        import psycopg
        import redis

        self.pg = psycopg.connect(pg_url, autocommit=True)
        self.redis = redis.Redis.from_url(redis_url)

    def snapshot(self) -> dict[str, float]:
        row = self.pg.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted,"
            " (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        info = self.redis.info("all")  # stats and commandstats in one command
        calls = {f"redis:{k[8:]}": float(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_")}
        return {
            "t": time.monotonic(),
            "pg_xact": float(row[0]),
            "pg_rows": float(row[1] + row[2] + row[3]),
            "wal_bytes": float(row[4]),
            "redis_commands": float(info["total_commands_processed"]),
        } | calls

    def settled(self) -> dict[str, float]:
        # Backends flush their statistics at most once a second (an idle one within a second).
        time.sleep(1.5)
        return self.snapshot()


class Meter:
    """CPU of every process tree, the database and Redis counters, around one phase; per request, net
    of what the same processes do idle (beats, heartbeats, the worker's broker polls): `idle()` first."""

    def __init__(self, pids: dict[str, int], counters: Counters) -> None:
        self.pids, self.counters = pids, counters
        self.idle_cores: dict[str, float] = {}
        self.idle_rates: dict[str, float] = {}

    def idle(self, seconds: float) -> dict[str, Any]:
        self.start()
        time.sleep(seconds)
        cpu = self.cpu.stop()
        after = self.counters.snapshot()
        elapsed = after["t"] - self.before["t"]
        self.idle_cores = {n: cpu[f"{n}_cores"] for n in self.pids}
        self.idle_rates = {k: (v - self.before.get(k, 0.0)) / elapsed for k, v in after.items() if k != "t"}
        return {"cores": self.idle_cores, "per_second": {k: round(v, 2) for k, v in self.idle_rates.items() if v}}

    def start(self, *, settle: bool = True) -> None:
        self.before = self.counters.settled() if settle else self.counters.snapshot()
        self.cpu = c.CpuMeter(self.pids).start()

    def stop(self, requests: int, *, settle: bool = True) -> dict[str, Any]:
        cpu = self.cpu.stop()
        after = self.counters.settled() if settle else self.counters.snapshot()
        wall, n, elapsed = cpu["wall_s"], max(1, requests), after["t"] - self.before["t"]
        out: dict[str, Any] = {"requests": requests, "wall_s": wall, "rps": round(requests / wall, 1), "cpu": cpu}
        for name in self.pids:
            net = cpu[f"{name}_cores"] - self.idle_cores.get(name, 0.0)
            out[f"{name}_ms_per_request"] = round(max(0.0, net) * wall * 1000 / n, 3)
        out["generator_ms_per_request"] = round(cpu["generator_cores"] * wall * 1000 / n, 3)
        redis_calls = {}
        for k, v in after.items():
            if k == "t":
                continue
            per = round((v - self.before.get(k, 0.0) - self.idle_rates.get(k, 0.0) * elapsed) / n, 2)
            if k.startswith("redis:"):
                if abs(per) >= 0.05:
                    redis_calls[k[6:]] = per
            else:
                out[f"{k}_per_request"] = per
        out["redis_calls_per_request"] = dict(sorted(redis_calls.items(), key=lambda kv: -kv[1]))
        return out


def body(**extra: Any) -> bytes:
    return json.dumps({"model": "bench-model", "input": PROMPT, **extra}).encode()


async def load(gw: c.Gateway, payload: bytes, *, stream: bool, concurrency: int, duration: float) -> int:
    """Creates at `concurrency` until `duration` s; the number that succeeded (a failure stops the run)."""
    done = 0
    deadline = time.perf_counter() + duration

    async def client() -> None:
        nonlocal done
        cl = c.RawHttp(f"{gw.url}/v1", gw.headers)
        try:
            while time.perf_counter() < deadline:
                res = await cl.request("POST", "/responses", payload, sse=stream, keep_body=not stream, timeout=60)
                if not res.ok:
                    raise RuntimeError(f"create failed: {res.status} {res.error} {(res.body or b'')[:300]!r}")
                done += 1
        finally:
            cl.close()

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return done


async def background(gw: c.Gateway, *, concurrency: int, duration: float, poll: float) -> dict[str, Any]:
    """Background creates, each polled (GET) until it is completed; how many and how long each took."""
    payload = body(background=True, store=True)
    took: list[float] = []
    polls = 0
    deadline = time.perf_counter() + duration

    async def client() -> None:
        nonlocal polls
        cl = c.RawHttp(f"{gw.url}/v1", gw.headers)
        try:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                res = await cl.request("POST", "/responses", payload, keep_body=True, timeout=60)
                if not res.ok or res.body is None:
                    raise RuntimeError(f"background create failed: {res.status} {res.error} {res.body!r:.300}")
                rid = json.loads(res.body)["id"]
                for _ in range(int(120 / poll)):  # bounded: two minutes per response at most
                    await asyncio.sleep(poll)
                    polls += 1
                    got = await cl.request("GET", f"/responses/{rid}", keep_body=True, timeout=60)
                    status = json.loads(got.body or b"{}").get("status")
                    if status == "completed":
                        took.append(time.perf_counter() - t0)
                        break
                    if status not in ("queued", "in_progress"):
                        raise RuntimeError(f"background response {rid}: {status} {got.body!r:.300}")
                else:
                    raise RuntimeError(f"background response {rid} did not complete in 120 s")
        finally:
            cl.close()

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return {"completed": len(took), "polls": polls, "seconds_to_complete": c.summary(took, 1, 3)}


async def slow_streams(
    gw: c.Gateway, model: str, n: int, hold: float, meter: Meter, web_pids: list[int]
) -> dict[str, Any]:
    """Open `n` slow streams (at most 32 waiting for their first token), then hold them `hold` s."""
    payload = json.dumps({"model": model, "input": PROMPT, "stream": True}).encode()
    times: list[list[float]] = [[] for _ in range(n)]
    clients = [c.RawHttp(f"{gw.url}/v1", gw.headers) for _ in range(n)]
    rss_before = sum(c.rss_bytes(p) for p in web_pids)
    tasks: list[asyncio.Task[c.Result]] = []
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        opened = sum(1 for t in times[: len(tasks)] if t)
        if opened >= n:
            break
        if len(tasks) < n and len(tasks) - opened < 32:
            i = len(tasks)
            tasks.append(asyncio.ensure_future(clients[i].request("POST", "/responses", payload, sse=True, match=DELTA, times=times[i], timeout=600)))  # fmt: skip
            continue
        await asyncio.sleep(0.005)
    opened = sum(1 for t in times if t)
    events_before = sum(len(t) for t in times)
    meter.start(settle=False)  # the window: every stream open, no create in flight (no blocking wait)
    await asyncio.sleep(hold)
    rss = sum(c.rss_bytes(p) for p in web_pids)
    events = sum(len(t) for t in times) - events_before
    out = meter.stop(opened, settle=False)
    for task in tasks:
        task.cancel()
    for cl in clients:
        cl.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(3)  # the gateway stores the disconnected streams as cancelled: not the next phase's work
    wall = out["wall_s"]
    out |= {
        "streams_open": opened,
        "events_per_second": round(events / wall, 1),
        "web_cores_per_1000_streams": round(out["web_ms_per_request"] / wall, 3),  # net of idle
        "web_us_per_event": round(out["web_ms_per_request"] * max(1, opened) * 1000 / max(1, events), 1),
        "rss_kib_per_stream": round((rss - rss_before) / 1024 / max(1, opened), 1),
        "redis_commands_per_stream_second": round(out["redis_commands_per_request"] / wall, 3),
    }
    return out


def capacity(phases: dict[str, dict[str, Any]], args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The table: per-request figures times the rate, over the headroom (run at `headroom` of capacity)."""
    a, b, bg, st = phases["stored"], phases["stored_stream"], phases["background"], phases["streams"]
    m = args.stream_share

    def mix(key: str) -> float:
        return (1 - m) * a[key] + m * b[key]

    web_ms, pg_ms, redis_ms = mix("web_ms_per_request"), mix("postgres_ms_per_request"), mix("redis_ms_per_request")
    rows_per, xact_per, wal_per = mix("pg_rows_per_request"), mix("pg_xact_per_request"), mix("wal_bytes_per_request")
    redis_per = mix("redis_commands_per_request")
    worker_ms = bg["worker_ms_per_request"]
    h = args.headroom
    table: dict[str, Any] = {}

    def beyond(row: dict[str, float]) -> str:
        """Which shared unit the load outgrows (web and workers scale out by adding containers)."""
        over = [f"Redis ({row['redis_cores']:.1f} of 1 core)"] if row["redis_cores"] > 1 else []
        if row["pg_cores"] > args.pg_primary_cores:
            over.append(f"PostgreSQL primary ({row['pg_cores']:.0f} of {args.pg_primary_cores} cores)")
        return ", ".join(over) or "none"

    lines = [
        "| load | web cores | worker cores | PostgreSQL rows written/s (transactions/s) | PostgreSQL cores | "
        "WAL MB/s | Redis commands/s (Redis cores) | past one unit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate in SCALES:
        bg_rate = rate * args.background_share
        row = {
            "web_cores": rate * web_ms / 1000 / h,
            "worker_cores": bg_rate * worker_ms / 1000 / h,
            "pg_rows_per_s": rate * rows_per + bg_rate * bg["pg_rows_per_request"],
            "pg_xact_per_s": rate * xact_per + bg_rate * bg["pg_xact_per_request"],
            "pg_cores": (rate * pg_ms + bg_rate * bg["postgres_ms_per_request"]) / 1000 / h,
            "wal_mb_per_s": (rate * wal_per + bg_rate * bg["wal_bytes_per_request"]) / 1e6,
            "redis_ops_per_s": rate * redis_per + bg_rate * bg["redis_commands_per_request"],
            "redis_cores": (rate * redis_ms + bg_rate * bg["redis_ms_per_request"]) / 1000 / h,
        }
        table[f"{rate}_rps"] = {k: round(v, 2) for k, v in row.items()}
        lines.append(
            f"| {rate:,} stored creates/s | {row['web_cores']:,.1f} | {row['worker_cores']:,.1f} | "
            f"{row['pg_rows_per_s']:,.0f} ({row['pg_xact_per_s']:,.0f}) | {row['pg_cores']:,.1f} | "
            f"{row['wal_mb_per_s']:,.1f} | {row['redis_ops_per_s']:,.0f} ({row['redis_cores']:,.2f}) | {beyond(row)} |"
        )
    # 100,000 open streams: holding them (the window's CPU per stream), and opening/finishing them
    # at N / stream length per second (each one a stored streamed create).
    n = 100_000
    opens = n / args.stream_seconds
    hold_cores = n * st["web_cores_per_1000_streams"] / 1000
    row = {
        "web_cores": (hold_cores + opens * b["web_ms_per_request"] / 1000) / h,
        "worker_cores": 0.0,
        "pg_rows_per_s": opens * b["pg_rows_per_request"],
        "pg_xact_per_s": opens * b["pg_xact_per_request"],
        "pg_cores": opens * b["postgres_ms_per_request"] / 1000 / h,
        "wal_mb_per_s": opens * b["wal_bytes_per_request"] / 1e6,
        "redis_ops_per_s": n * st["redis_commands_per_stream_second"] + opens * b["redis_commands_per_request"],
        "redis_cores": opens * b["redis_ms_per_request"] / 1000 / h,
        "web_memory_gib": n * st["rss_kib_per_stream"] / 2**20,
    }
    table["100000_streams"] = {k: round(v, 2) for k, v in row.items()}
    lines.append(
        f"| {n:,} open streams ({args.stream_seconds:.0f} s each: {opens:,.0f} opened/s) | "
        f"{row['web_cores']:,.1f} (+{row['web_memory_gib']:,.1f} GiB RSS) | – | "
        f"{row['pg_rows_per_s']:,.0f} ({row['pg_xact_per_s']:,.0f}) | {row['pg_cores']:,.1f} | "
        f"{row['wal_mb_per_s']:,.1f} | {row['redis_ops_per_s']:,.0f} ({row['redis_cores']:,.2f}) | {beyond(row)} |"
    )
    # One primary: `pg_primary_cores` at the headroom, by the measured CPU per stored create.
    ceiling = args.pg_primary_cores * h * 1000 / pg_ms
    table["assumptions"] = {
        "stream_share": m,
        "background_share": args.background_share,
        "headroom": h,
        "stream_seconds": args.stream_seconds,
        "pg_primary_cores": args.pg_primary_cores,
        "per_stored_create": {
            "web_ms": round(web_ms, 3),
            "postgres_ms": round(pg_ms, 3),
            "redis_ms": round(redis_ms, 3),
            "pg_rows": round(rows_per, 2),
            "pg_xact": round(xact_per, 2),
            "wal_bytes": round(wal_per),
            "redis_commands": round(redis_per, 2),
        },
        "worker_ms_per_background_response": worker_ms,
        "pg_primary_stored_creates_per_s": round(ceiling),
        "redis_one_core_stored_creates_per_s": round(h * 1000 / redis_ms) if redis_ms > 0 else None,
    }
    return table, "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per load phase")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--bg-concurrency", type=int, default=16, help="background creates polled at once")
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between a background response's polls")
    ap.add_argument("--streams", type=int, default=500, help="slow streams held open in phase e")
    ap.add_argument("--hold", type=float, default=4.0, help="seconds the streams are held (the window)")
    ap.add_argument("--latency", type=float, default=0.02, help="the scripted upstream's latency (s)")
    ap.add_argument("--idle", type=float, default=4.0, help="seconds of idle baseline, measured first")
    ap.add_argument("--worker-concurrency", type=int, default=2)
    ap.add_argument("--stream-share", type=float, default=0.5, help="share of stored creates that stream")
    ap.add_argument("--background-share", type=float, default=0.1, help="background creates on top, as a share")
    ap.add_argument("--headroom", type=float, default=0.6, help="run every resource at this share of capacity")
    ap.add_argument("--stream-seconds", type=float, default=30.0, help="assumed length of a held stream")
    ap.add_argument("--pg-primary-cores", type=int, default=32, help="cores of the assumed PostgreSQL primary")
    args = ap.parse_args()
    c.raise_nofile()
    c.use_uvloop()
    from tests.support.servers import start_redis

    d = c.run_dir("capacity")
    pg = c.start_postgres(d)
    rds = start_redis(d)
    c.log(f"redis at {rds.url} (pid {rds.pid})")
    up = c.Upstream(latency=args.latency, log_dir=d)
    lean = c.LeanUpstream(log_dir=d, name="lean-upstream")
    slow = f"slow-{int((120 + args.hold + 30) / 0.1)}"  # longer than any ramp and hold: the client ends them
    big = 10**9
    # Priced routes: with no price a budget reserves 0 micro-USD, and the counting scripts' `-0`
    # (Lua's negative zero) is an integer Redis refuses, so every settle failed (reported separately).
    price = {"input_usd_per_million": 1, "output_usd_per_million": 2}
    config = {
        "providers": [
            {"name": "local", "kind": "chat_completions", "base_url": up.base_url},
            {"name": "lean", "kind": "chat_completions", "base_url": lean.base_url},
        ],
        "models": [
            {"name": "bench-model", "targets": [{"provider": "local", "model": "echo"}], "price": price},
            {"name": slow, "targets": [{"provider": "lean", "model": slow}], "price": price},
        ],
        "tenants": [  # limits that never bind: the counting is what is measured
            {
                "name": "bench",
                "requests_per_minute": big,
                "tokens_per_minute": big,
                "max_concurrent_requests": 10**6,
                "budget": {"period": "month", "tokens": big, "usd": big},
                "keys": [{"name": "bench", "requests_per_minute": big, "max_concurrent_requests": 10**6}],
            }
        ],
    }
    extra = {"REDIS_URL": rds.url, "GATEWAY_UPSTREAM_MAX_CONNECTIONS": str(max(4000, 2 * args.streams))}
    gw = c.Gateway(
        db_url=pg.url,
        providers={},
        models={},
        log_dir=d,
        config=config,
        extra_env=extra,
        uvicorn_args=["--workers", "2"],
    )
    worker_cmd = [c.PYTHON, "-m", "celery", "-A", "project", "worker", "--loglevel=WARNING"]
    worker_cmd += [f"--concurrency={args.worker_concurrency}", "--without-gossip", "--without-mingle"]
    worker = c.Proc("worker", worker_cmd, env=gw.env, log_dir=d)
    time.sleep(3)  # both web processes and the worker's pool up
    web_pids = [p for p in c.tree_pids(gw.proc.pid) if p != gw.proc.pid]
    pids = {"web": gw.proc.pid, "worker": worker.pid, "postgres": pg.pid, "redis": rds.pid, "upstream": up.proc.pid}
    counters = Counters(pg.url, rds.url)
    meter = Meter(pids, counters)
    c.log("warm-up: every web process's caches and pools, and the worker")
    asyncio.run(load(gw, body(), stream=False, concurrency=args.concurrency, duration=2.0))
    asyncio.run(background(gw, concurrency=4, duration=2.0, poll=args.poll))
    idle = meter.idle(args.idle)
    c.log(f"idle ({args.idle:.0f} s, subtracted from every phase): {idle}")

    phases: dict[str, dict[str, Any]] = {}
    # The streams first: their RSS delta is blurred least by memory that the load phases freed.
    stream_meter = Meter(pids | {"lean_upstream": lean.proc.pid}, counters)
    stream_meter.idle_cores, stream_meter.idle_rates = meter.idle_cores, meter.idle_rates
    phases["streams"] = asyncio.run(slow_streams(gw, slow, args.streams, args.hold, stream_meter, web_pids))
    for name, payload, stream in (
        ("stored", body(), False),
        ("stored_stream", body(stream=True), True),
        ("store_false", body(store=False), False),
    ):
        meter.start()
        done = asyncio.run(load(gw, payload, stream=stream, concurrency=args.concurrency, duration=args.duration))
        phases[name] = meter.stop(done)
    meter.start()
    bg = asyncio.run(background(gw, concurrency=args.bg_concurrency, duration=args.duration, poll=args.poll))
    phases["background"] = meter.stop(bg["completed"]) | bg
    for name, ph in phases.items():
        cpu = ph["cpu"]
        c.log(
            f"{name}: {ph['rps']} req/s; cores web {cpu['web_cores']}, worker {cpu['worker_cores']}, "
            f"postgres {cpu['postgres_cores']}, redis {cpu['redis_cores']}, others {cpu['others_cores']}; "
            f"ms/request web {ph['web_ms_per_request']}, worker {ph['worker_ms_per_request']}, postgres "
            f"{ph['postgres_ms_per_request']}; per request: {ph['pg_xact_per_request']} transactions, "
            f"{ph['pg_rows_per_request']} rows, {ph['wal_bytes_per_request']:.0f} WAL bytes, "
            f"{ph['redis_commands_per_request']} Redis commands {ph['redis_calls_per_request']}"
        )
    st = phases["streams"]
    c.log(
        f"streams: {st['streams_open']}/{args.streams} open, {st['web_cores_per_1000_streams']} web cores per 1,000, "
        f"{st['web_us_per_event']} us per relayed event, {st['rss_kib_per_stream']} KiB RSS per stream, "
        f"{st['redis_commands_per_stream_second']} Redis commands per stream-second"
    )
    for proc in (gw.proc, worker):  # counting that failed open would make Redis look cheaper than it is
        failed = proc.log_path.read_text(errors="replace").count("rate limits")
        if failed:
            c.log(f"WARNING: {proc.name} logged {failed} rate-limit failures (see {proc.log_path})")
    table, markdown = capacity(phases, args)
    print(markdown, flush=True)
    a = table["assumptions"]
    c.log(
        f"one {args.pg_primary_cores}-core PostgreSQL primary at {args.headroom:.0%}: "
        f"{a['pg_primary_stored_creates_per_s']:,} stored creates/s; one Redis core: "
        f"{a['redis_one_core_stored_creates_per_s']} stored creates/s"
    )
    c.write_result(
        "capacity", {"args": vars(args), "idle": idle, "phases": phases, "capacity": table, "table_markdown": markdown}
    )
    counters.pg.close()
    for srv in (worker, gw, lean, up):
        srv.stop()
    rds.stop()
    pg.stop()


if __name__ == "__main__":
    main()
