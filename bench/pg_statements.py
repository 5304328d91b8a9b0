"""Where PostgreSQL's work per stored create goes: pg_stat_statements, WAL, blocks, indexes.

Starts a throwaway PostgreSQL with `pg_stat_statements` and `auto_explain` preloaded, the
scripted upstream and the gateway (as bench/overhead.py does), sends `--warmup` stored creates,
resets the statistics, sends `--requests` stored creates at `--concurrency`, and prints per
create: statements and round trips (every statement the server ran, BEGIN/COMMIT included,
`pg_stat_statements.track_utility` is on), transactions, rows, execution and planning time,
shared blocks hit/read/dirtied/written, WAL records/full-page images/bytes, the index writes of
the tables a create touches, the postgres processes' CPU; then the top statements. With
`--explain`, a few more creates run with `auto_explain` (ANALYZE, BUFFERS, nested statements)
and their plans are printed from the server's log: the real statements with real parameters.

`--baseline REV` runs the same against the gateway of commit REV (its own database on the
same server, after this tree's), so two trees are compared in one run.

    .venv/bin/python bench/pg_statements.py [--requests 500] [--concurrency 64] [--stream] [--explain]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c

PG_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements,auto_explain",
    "pg_stat_statements.track": "all",  # the statements a statement runs too (RI triggers' queries)
    "pg_stat_statements.track_planning": "on",
    "pg_stat_statements.max": "5000",
    "track_io_timing": "on",
    # auto_explain.log_min_duration stays at its default (-1, off) here: a command-line setting
    # would outrank the ALTER SYSTEM that switches it on for the --explain phase.
    "auto_explain.log_analyze": "on",
    "auto_explain.log_buffers": "on",
    "auto_explain.log_wal": "on",
    "auto_explain.log_nested_statements": "on",
    "auto_explain.log_timing": "on",
    "auto_explain.log_format": "text",
}

# Tables a stored create writes: their index writes are index maintenance per create.
TABLES = ("responses_api_response", "responses_api_item", "responses_api_responseitem")


def body(stream: bool) -> bytes:
    return json.dumps({"model": "bench-model", "input": "Say hello to the benchmark.", "stream": stream}).encode()


async def drive(base: str, headers: dict[str, str], n: int, concurrency: int, stream: bool) -> float:
    """`n` stored creates from `concurrency` keep-alive connections; the wall time."""
    remaining = n
    payload = body(stream)

    async def worker() -> None:
        nonlocal remaining
        client = c.RawHttp(base, headers)
        try:
            while remaining > 0:
                remaining -= 1
                res = await client.request("POST", "/responses", payload, sse=stream, timeout=60, keep_body=True)
                if not res.ok:
                    raise RuntimeError(f"create failed: {res.status} {res.error} {(res.body or b'')[:300]!r}")
        finally:
            client.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    return time.perf_counter() - t0


MARK = "/* pg_statements */ "  # this script's own statements, left out of the counts


def query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(MARK + sql, params)
        return cursor.fetchall() if cursor.description is not None else []


def snapshot(url: str) -> dict:
    """Cumulative counters of this database (and the cluster's WAL)."""
    xact = query(url, "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()")[0]
    wal = query(
        url, "SELECT wal_records, wal_fpi, (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint FROM pg_stat_wal"
    )[0]
    idx = query(
        url,
        "SELECT relname, indexrelname, idx_scan FROM pg_stat_user_indexes WHERE relname = ANY(%s)",
        (list(TABLES),),
    )
    tup = query(
        url,
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        (list(TABLES),),
    )
    return {
        "commits": xact[0],
        "rollbacks": xact[1],
        "wal_records": wal[0],
        "wal_fpi": wal[1],
        "wal_bytes": wal[2],
        "index_scans": {f"{r[0]}.{r[1]}": r[2] for r in idx},
        "tuples": {r[0]: {"ins": r[1], "upd": r[2], "hot_upd": r[3]} for r in tup},
    }


STATEMENTS_SQL = """
SELECT query, calls, rows, total_exec_time, total_plan_time, plans,
       shared_blks_hit, shared_blks_read, shared_blks_dirtied, shared_blks_written,
       wal_records, wal_fpi, wal_bytes::bigint, toplevel
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE '/* pg_statements */%%'
ORDER BY total_exec_time + total_plan_time DESC
"""
COLUMNS = [
    "query",
    "calls",
    "rows",
    "exec_ms",
    "plan_ms",
    "plans",
    "blks_hit",
    "blks_read",
    "blks_dirtied",
    "blks_written",
    "wal_records",
    "wal_fpi",
    "wal_bytes",
    "toplevel",
]


def process_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of the server and each of its processes (backends, WAL writer, autovacuum)."""
    seconds = {p: c.cpu_seconds(p) for p in c.tree_pids(pid)}
    return {p: v for p, v in seconds.items() if v == v}  # nan: it ended while being read


def is_fk_check(sql: str) -> bool:
    # The RI trigger's query; pg_stat_statements may keep it as "SELECT $2 FROM ONLY ..." when it
    # first saw it normalised.
    return sql.startswith("SELECT ") and ' FROM ONLY "public".' in sql and "FOR KEY SHARE OF x" in sql


def settle_stats() -> None:
    # Busy backends report their table, index, transaction and WAL counters at most once a
    # second, idle ones after 10 s (PostgreSQL 15: PGSTAT_IDLE_INTERVAL); wait for that before
    # reading them. pg_stat_statements and the WAL position are exact at once.
    time.sleep(11)


def measure(label: str, url: str, pg_pid: int, gw: c.Gateway, args: argparse.Namespace) -> dict:
    base = f"{gw.url}/v1"
    asyncio.run(drive(base, gw.headers, args.warmup, args.concurrency, args.stream))
    settle_stats()
    query(url, "SELECT pg_stat_statements_reset()")
    before = snapshot(url)
    cpu0 = process_cpu(pg_pid)
    gw0 = c.tree_cpu_seconds(gw.proc.pid)
    wall = asyncio.run(drive(base, gw.headers, args.requests, args.concurrency, args.stream))
    cpu1 = process_cpu(pg_pid)
    gw_cpu = c.tree_cpu_seconds(gw.proc.pid) - gw0
    # Processes that started during the run count whole; one that ended during it is not seen.
    cpu = sum(v - cpu0.get(pid, 0.0) for pid, v in cpu1.items())
    settle_stats()
    after = snapshot(url)
    rows = [dict(zip(COLUMNS, r)) for r in query(url, STATEMENTS_SQL)]
    n = args.requests
    # Foreign-key checks (deferred: fired at commit) are the server's own queries, not round trips.
    checks = [r for r in rows if is_fk_check(r["query"])]
    sent = [r for r in rows if r["toplevel"] and not is_fk_check(r["query"])]
    top = [r for r in rows if r["toplevel"]]
    per = {
        "statements sent (round trips)": sum(r["calls"] for r in sent) / n,
        "foreign-key checks": sum(r["calls"] for r in checks) / n,
        "foreign-key checks exec_ms": sum(r["exec_ms"] for r in checks) / n,
        "transactions (commits)": (after["commits"] - before["commits"]) / n,
        "rows": sum(r["rows"] for r in top) / n,
        "exec_ms": sum(r["exec_ms"] for r in top) / n,
        "plan_ms": sum(r["plan_ms"] for r in top) / n,
        "plans": sum(r["plans"] for r in top) / n,
        "blks_hit": sum(r["blks_hit"] for r in top) / n,
        "blks_read": sum(r["blks_read"] for r in top) / n,
        "blks_dirtied": sum(r["blks_dirtied"] for r in top) / n,
        "blks_written": sum(r["blks_written"] for r in top) / n,
        "wal_records": (after["wal_records"] - before["wal_records"]) / n,
        "wal_fpi": (after["wal_fpi"] - before["wal_fpi"]) / n,
        "wal_bytes": (after["wal_bytes"] - before["wal_bytes"]) / n,
        "pg_cpu_ms": cpu / n * 1000,
        "gateway_cpu_ms": gw_cpu / n * 1000,  # the other side of the round trips (noisy on a shared machine)
    }
    index_writes = {}
    for table in TABLES:
        t0, t1 = before["tuples"].get(table, {}), after["tuples"].get(table, {})
        ins = (t1.get("ins", 0) - t0.get("ins", 0)) / n
        upd = (t1.get("upd", 0) - t0.get("upd", 0)) / n
        hot = (t1.get("hot_upd", 0) - t0.get("hot_upd", 0)) / n
        indexes = sorted(k for k in after["index_scans"] if k.startswith(table + "."))
        # Every index gets an entry per inserted row and per non-HOT update.
        index_writes[table] = {
            "rows_inserted": ins,
            "rows_updated": upd,
            "hot_updates": hot,
            "indexes": len(indexes),
            "index_entries": (ins + upd - hot) * len(indexes),
            "index_scans_during_run": {
                k.split(".", 1)[1]: after["index_scans"][k] - before["index_scans"].get(k, 0) for k in indexes
            },
        }
    out = {
        "label": label,
        "requests": n,
        "concurrency": args.concurrency,
        "stream": args.stream,
        "wall_s": round(wall, 3),
        "creates_per_s": round(n / wall, 1),
        "per_create": {k: round(v, 4) for k, v in per.items()},
        "index_maintenance": index_writes,
        "statements": [
            {
                **{k: r[k] for k in ("calls", "rows", "plans", "toplevel")},
                "calls_per_create": round(r["calls"] / n, 3),
                "exec_ms_per_create": round(r["exec_ms"] / n, 4),
                "mean_exec_ms": round(r["exec_ms"] / max(r["calls"], 1), 4),
                "plan_ms_per_create": round(r["plan_ms"] / n, 4),
                "blks_hit_per_create": round(r["blks_hit"] / n, 2),
                "blks_dirtied_per_create": round(r["blks_dirtied"] / n, 3),
                "wal_records_per_create": round(r["wal_records"] / n, 2),
                "wal_bytes_per_create": round(r["wal_bytes"] / n, 1),
                "query": " ".join(r["query"].split()),
            }
            for r in rows[: args.top]
        ],
    }
    if args.explain:
        out["plans"] = explain(url, base, gw, args)
    return out


def explain(url: str, base: str, gw: c.Gateway, args: argparse.Namespace) -> list[str]:
    """Plans (EXPLAIN ANALYZE, BUFFERS, WAL) of the statements of `--explain-requests` creates."""
    log_path = Path(PG.log_path)
    start = log_path.stat().st_size
    query(url, "ALTER SYSTEM SET auto_explain.log_min_duration = 0")
    query(url, "SELECT pg_reload_conf()")
    time.sleep(0.5)
    try:
        asyncio.run(drive(base, gw.headers, args.explain_requests, 1, args.stream))
    finally:
        query(url, "ALTER SYSTEM RESET auto_explain.log_min_duration")
        query(url, "SELECT pg_reload_conf()")
    with open(log_path, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode(errors="replace")
    plans = re.split(r"(?m)^\S.*LOG:\s+duration: ", text)
    return [p.strip() for p in plans[1:] if "Query Text" in p]


def report(res: dict) -> None:
    print(
        f"\n== {res['label']}: {res['requests']} stored creates, c={res['concurrency']}, stream={res['stream']}, "
        f"{res['creates_per_s']} creates/s"
    )
    for k, v in res["per_create"].items():
        print(f"  {k:32s} {v:>10}")
    print("  index maintenance per create:")
    for table, w in res["index_maintenance"].items():
        unused = [k for k, v in w["index_scans_during_run"].items() if not v]
        print(
            f"    {table}: {w['rows_inserted']:.2f} inserted, {w['rows_updated']:.2f} updated "
            f"({w['hot_updates']:.2f} HOT), {w['indexes']} indexes -> {w['index_entries']:.1f} index entries; "
            f"not scanned during the run: {', '.join(unused) or '-'}"
        )
    print("  top statements (per create):")
    for s in res["statements"]:
        print(
            f"    calls {s['calls_per_create']:>6} exec {s['exec_ms_per_create']:>7.4f} ms "
            f"plan {s['plan_ms_per_create']:>7.4f} ms hit {s['blks_hit_per_create']:>7} "
            f"dirtied {s['blks_dirtied_per_create']:>6} wal {s['wal_records_per_create']:>6} rec "
            f"{s['wal_bytes_per_create']:>8} B {'[fk check] ' if is_fk_check(s['query']) else ''}| {s['query'][:150]}"
        )
    for plan in res.get("plans", []):
        print("\n  -- " + plan.replace("\n", "\n     "))


PG = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument(
        "--warmup",
        type=int,
        default=1000,
        help="creates before the measurement: enough for every pool connection to reach its steady state "
        "(prepared statements, generic plans)",
    )
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.02, help="upstream latency in seconds")
    ap.add_argument("--stream", action="store_true", help="streamed creates (row inserted at open, updated at end)")
    ap.add_argument("--top", type=int, default=12, help="statements listed")
    ap.add_argument("--explain", action="store_true", help="also print auto_explain plans of a few creates")
    ap.add_argument("--explain-requests", type=int, default=2)
    ap.add_argument("--baseline", metavar="REV", default="", help="also measure the gateway of commit REV")
    ap.add_argument(
        "--variant",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="also measure this tree with an environment variable set (its own database), "
        "e.g. DB_PREPARED_STATEMENTS=off; repeatable, one run each",
    )
    args = ap.parse_args()
    c.raise_nofile()
    c.use_uvloop()
    global PG
    d = c.run_dir("pg-statements")
    from tests.support.servers import start_postgres

    PG = pg = start_postgres(d / "pg", settings=PG_SETTINGS)
    c.log(f"postgres at {pg.url} (pid {pg.pid}) with pg_stat_statements")
    query(pg.url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    up = c.Upstream(latency=args.latency, log_dir=d)
    providers, models = {"local": up.base_url}, {"bench-model": ("local", "echo")}
    results = []
    gw = c.Gateway(db_url=pg.url, providers=providers, models=models, log_dir=d)
    results.append(measure("this tree", pg.url, pg.pid, gw, args))
    gw.stop()
    for n, variant in enumerate(args.variant):
        name, _, value = variant.partition("=")
        url = c.create_database(pg.url, f"variant{n}")
        query(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        var_gw = c.Gateway(
            db_url=url, providers=providers, models=models, log_dir=d, name=f"variant{n}", extra_env={name: value}
        )
        results.append(measure(f"this tree, {variant}", url, pg.pid, var_gw, args))
        var_gw.stop()
    if args.baseline:
        tree = c.source_tree(args.baseline, d / "baseline-tree")
        url = c.create_database(pg.url, "baseline")
        query(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        base_gw = c.Gateway(db_url=url, providers=providers, models=models, log_dir=d, name="baseline", tree=tree)
        results.append(measure(f"baseline {args.baseline}", url, pg.pid, base_gw, args))
        base_gw.stop()
    for res in results:
        report(res)
    path = c.write_result("pg_statements", {"args": vars(args), "results": results})
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
