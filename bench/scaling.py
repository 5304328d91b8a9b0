"""Scaling across web processes: the same gateway under uvicorn with 1, 2 and 4 workers (as
the compose file's WEB_CONCURRENCY does), non-streaming throughput at a fixed concurrency,
against the scripted upstream. One PostgreSQL; each worker count gets its own database and
process tree; CPU is the whole tree's (every worker).

    .venv/bin/python bench/scaling.py --workers 1,2,4 --concurrency 64 --duration 5 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import time

import common as c
import overhead as o


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--latency", type=float, default=0.02)
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    c.raise_nofile()
    c.use_uvloop()
    d = c.run_dir("scaling")
    pg = c.start_postgres(d)
    up = c.Upstream(latency=args.latency, log_dir=d)
    o.UPSTREAM_PID, o.PG_PID = up.proc.pid, pg.pid
    rows: dict[int, list[dict]] = {}
    for n in counts:
        # One tree at a time: each process has its own database pool (DB_POOL_MAX_SIZE), and
        # three trees at once would exceed the throwaway server's max_connections.
        gw = c.Gateway(
            db_url=c.create_database(pg.url, f"w{n}"),
            providers={"local": up.base_url},
            models={"bench-model": ("local", "echo")},
            log_dir=d,
            name=f"workers-{n}",
            uvicorn_args=["--workers", str(n)],
        )
        target = o.Target(f"workers-{n}", f"{gw.url}/v1", gw.headers, direct=False, pid=gw.proc.pid)
        time.sleep(2)  # every worker up
        asyncio.run(o.load(target, args.concurrency, 2.0, 10**6))  # warm every worker's caches and pool
        rows[n] = []
        for _ in range(args.rounds):
            rows[n].append(asyncio.run(o.load(target, args.concurrency, args.duration, 10**6)))
            time.sleep(0.3)
        gw.stop()
    results = {}
    for n in counts:
        lat = [x for cell in rows[n] for x in cell["latencies"]]
        elapsed = sum(cell["elapsed"] for cell in rows[n])
        cores = sum(cell["cpu"].get(f"workers-{n}_cores", 0.0) for cell in rows[n]) / len(rows[n])
        results[n] = {
            "rps": round(len(lat) / elapsed, 1),
            "errors": sum(cell["errors"] for cell in rows[n]),
            "latency_ms": c.summary(lat, 1000),
            "gateway_cores": round(cores, 3),
            "machine_cores": round(sum(cell["cpu"]["machine_cores"] for cell in rows[n]) / len(rows[n]), 3),
        }
        c.log(
            f"{n} worker(s): {results[n]['rps']} req/s at c={args.concurrency}, p50 "
            f"{results[n]['latency_ms']['median']} ms, p99 {results[n]['latency_ms']['p99']} ms, "
            f"gateway {results[n]['gateway_cores']} cores, machine {results[n]['machine_cores']} cores, "
            f"errors {results[n]['errors']}"
        )
    c.write_result(
        "scaling",
        {
            "benchmark": "scaling",
            "machine": c.machine_info(),
            "args": vars(args),
            "results": {str(n): r for n, r in results.items()},
        },
    )
    up.stop()
    pg.stop()


if __name__ == "__main__":
    main()
