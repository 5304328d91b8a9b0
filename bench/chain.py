"""Chain scaling: cost of a create with previous_response_id at chain lengths 1, 10, 100, 500.

Two parts, against one throwaway Postgres:

1. Query count and in-process time (Django in this process, the same code the
   gateway runs): `selectors.context_get(previous_response_id=head)` (chain
   head + chain items) then `services.response_insert` (the open row), measured
   together as "response_begin", `services.response_finish`, and
   `selectors.input_items_page` (GET /v1/responses/{id}/input_items), each
   under `CaptureQueriesContext`; chains are built directly through the
   services (one user + one assistant message per turn).
2. HTTP latency through the running gateway (uvicorn, production settings):
   one chain of 500 turns is built over the API (the scripted upstream echoes,
   latency --latency, default 0 so the gateway's own cost shows), then
   --samples creates on top of the heads at length 1/10/100/500 (alternating)
   and GET input_items on each head. The same number of messages is also sent
   to the upstream directly, so the upstream's own share (it parses a longer
   request) can be subtracted.
   Measured twice: with only the chain in the database ("small_db", ~500
   responses: what a fresh deployment has) and after adding --fill other
   responses (default 50,000, with 2 item links each, then ANALYZE:
   "filled_db"), because Postgres plans the recursive chain query
   differently on a small table.

    /tmp/venv/bin/python bench/chain.py [--lengths 1,10,100,500] [--samples 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c


def _message(role: str, text: str, new_id) -> dict:  # type: ignore[no-untyped-def]
    kind = "output_text" if role == "assistant" else "input_text"
    part = {"type": kind, "text": text} | ({"annotations": [], "logprobs": []} if role == "assistant" else {})
    return {"type": "message", "id": new_id("msg"), "status": "completed", "role": role, "content": [part]}


def build_chain(tenant_id: int, length: int, heads_at: set[int]) -> dict[int, str]:
    """Store `length` chained turns through the services; returns {turn count: head id} for heads_at."""
    from responses_api.models import Response
    from responses_api.protocol.ids import new_id
    from responses_api.store import services

    previous = None
    heads: dict[int, str] = {}
    for turn in range(1, length + 1):
        rid = new_id("resp")
        user = _message("user", f"question {turn}", new_id)
        services.response_insert(
            row=services.response_row(
                response_id=rid,
                tenant_id=tenant_id,
                api_key_id=None,
                previous_response_id=None,
                model="bench-model",
                params={},
                created_at=datetime.now(UTC),
            ),
            status="in_progress",
        )
        Response.objects.filter(id=rid).update(previous_response_id=previous)
        services.response_finish(
            tenant_id=tenant_id,
            response={
                "id": rid,
                "status": "completed",
                "output": [_message("assistant", f"answer {turn}", new_id)],
                "usage": None,
                "completed_at": None,
            },
            input_items=[user],
        )
        previous = rid
        if turn in heads_at:
            heads[turn] = rid
    return heads


def in_process(db_url: str, lengths: list[int], repeats: int) -> dict:
    os.environ.update(
        {
            "DATABASE_URL": db_url,
            "SECRET_KEY": c.BENCH_SECRET_KEY,
            "DEBUG": "0",
            "LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "project.settings",
        }
    )
    os.environ.pop("REDIS_URL", None)
    os.environ.pop("GATEWAY_CONFIG", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    from responses_api.store import services

    key, _ = services.api_key_create(tenant_name="chain-inproc", name="bench")
    tenant_id = key.tenant_id
    t = time.perf_counter()
    heads = build_chain(tenant_id, max(lengths), set(lengths))
    c.log(f"in-process: built a {max(lengths)}-turn chain through the services in {time.perf_counter() - t:.1f}s")
    _INPROC.update(tenant_id=tenant_id, heads=heads)
    return in_process_measure(lengths, repeats)


_INPROC: dict = {}


def in_process_measure(lengths: list[int], repeats: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from responses_api.protocol.ids import new_id
    from responses_api.store import selectors, services

    tenant_id, heads = _INPROC["tenant_id"], _INPROC["heads"]
    out: dict = {}
    for length in lengths:
        head = heads[length]
        begin_q, begin_t, finish_q, finish_t, items_q, items_t = [], [], [], [], [], []
        begin_sql: list[float] = []
        ctx_len = 0
        for _ in range(repeats):
            rid = new_id("resp")
            user = _message("user", "next", new_id)
            with CaptureQueriesContext(connection) as q:
                t0 = time.perf_counter()
                context = selectors.context_get(
                    tenant_id=tenant_id, previous_response_id=head, conversation_id=None, input_items=[user]
                )
                services.response_insert(
                    row=services.response_row(
                        response_id=rid,
                        tenant_id=tenant_id,
                        api_key_id=None,
                        previous_response_id=head,
                        model="bench-model",
                        params={},
                        created_at=datetime.now(UTC),
                    ),
                    status="in_progress",
                )
                begin_t.append(time.perf_counter() - t0)
            begin_q.append(len(q.captured_queries))
            begin_sql.append(sum(float(x["time"]) for x in q.captured_queries))
            ctx_len = len(context)
            with CaptureQueriesContext(connection) as q:
                t0 = time.perf_counter()
                services.response_finish(
                    tenant_id=tenant_id,
                    response={
                        "id": rid,
                        "status": "completed",
                        "output": [_message("assistant", "ok", new_id)],
                        "usage": None,
                        "completed_at": None,
                    },
                    input_items=[user],
                )
                finish_t.append(time.perf_counter() - t0)
            finish_q.append(len(q.captured_queries))
            with CaptureQueriesContext(connection) as q:
                t0 = time.perf_counter()
                selectors.input_items_page(tenant_id=tenant_id, response_id=head, after=None, limit=20, order="desc")
                items_t.append(time.perf_counter() - t0)
            items_q.append(len(q.captured_queries))
        out[str(length)] = {
            "context_items": ctx_len,
            "response_begin_queries": max(begin_q),
            "response_begin_ms": c.summary(begin_t, 1000),
            "response_begin_sql_ms_median": round(c.pct(begin_sql, 50) * 1000, 3),
            "response_finish_queries": max(finish_q),
            "response_finish_ms": c.summary(finish_t, 1000),
            "input_items_queries": max(items_q),
            "input_items_ms": c.summary(items_t, 1000),
        }
        c.log(
            f"in-process length {length}: context {ctx_len} items, begin {max(begin_q)} queries "
            f"{out[str(length)]['response_begin_ms']['median']} ms, finish {max(finish_q)} queries, "
            f"input_items {max(items_q)} queries {out[str(length)]['input_items_ms']['median']} ms"
        )
    connection.close()
    return out


async def build_http_chain(gw: c.Gateway, lengths: list[int]) -> tuple[dict[int, str], list[float]]:
    cl = c.RawHttp(f"{gw.url}/v1", gw.headers)
    previous = None
    heads: dict[int, str] = {}
    t = time.perf_counter()
    build_ms: list[float] = []
    for turn in range(1, max(lengths) + 1):
        body = {"model": "bench-model", "input": f"question {turn}"}
        if previous:
            body["previous_response_id"] = previous
        res = await cl.request("POST", "/responses", json.dumps(body).encode(), keep_body=True, timeout=60)
        if not res.ok:
            raise RuntimeError(
                f"chain build failed at turn {turn}: {res.status} {res.error} {(res.body or b'')[:300]!r}"
            )
        build_ms.append(res.total * 1000)
        previous = json.loads(res.body or b"{}")["id"]
        if turn in lengths:
            heads[turn] = previous
    c.log(f"http: built a {max(lengths)}-turn chain over the API in {time.perf_counter() - t:.1f}s")
    cl.close()
    return heads, build_ms


async def over_http(
    gw: c.Gateway, up: c.Upstream, heads: dict[int, str], lengths: list[int], samples: int, label: str
) -> dict:
    cl = c.RawHttp(f"{gw.url}/v1", gw.headers)
    direct = c.RawHttp(up.base_url)
    create: dict[int, list[float]] = {n: [] for n in lengths}
    direct_t: dict[int, list[float]] = {n: [] for n in lengths}
    items: dict[int, list[float]] = {n: [] for n in lengths}
    retrieve: dict[int, list[float]] = {n: [] for n in lengths}
    for i in range(samples):
        order = lengths[i % len(lengths) :] + lengths[: i % len(lengths)]
        for n in order:
            body = json.dumps({"model": "bench-model", "input": "next", "previous_response_id": heads[n]}).encode()
            res = await cl.request("POST", "/responses", body, timeout=60)
            if not res.ok:
                raise RuntimeError(f"create on length {n} failed: {res.status} {res.error}")
            create[n].append(res.total)
            msgs = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"turn {k}"} for k in range(2 * n)]
            msgs.append({"role": "user", "content": "next"})
            res = await direct.request(
                "POST", "/chat/completions", json.dumps({"model": "echo", "messages": msgs}).encode(), timeout=60
            )
            direct_t[n].append(res.total)
            res = await cl.request("GET", f"/responses/{heads[n]}/input_items?limit=20")
            if not res.ok:
                raise RuntimeError(f"input_items on length {n} failed: {res.status}")
            items[n].append(res.total)
            res = await cl.request("GET", f"/responses/{heads[n]}")
            retrieve[n].append(res.total)
    cl.close()
    direct.close()
    out: dict = {}
    for n in lengths:
        out[str(n)] = {
            "create_ms": c.summary(create[n], 1000),
            "direct_upstream_same_messages_ms": c.summary(direct_t[n], 1000),
            "create_minus_direct_median_ms": round((c.pct(create[n], 50) - c.pct(direct_t[n], 50)) * 1000, 3),
            "input_items_ms": c.summary(items[n], 1000),
            "retrieve_ms": c.summary(retrieve[n], 1000),
        }
        c.log(
            f"http {label} length {n}: create p50 {out[str(n)]['create_ms']['median']} ms "
            f"(upstream alone {out[str(n)]['direct_upstream_same_messages_ms']['median']} ms), "
            f"input_items p50 {out[str(n)]['input_items_ms']['median']} ms"
        )
    return out


def fill_database(db_url: str, template_response: str, rows: int) -> dict:
    """Add `rows` other responses (copies of a template row) with 2 item links each, plus `rows` items; ANALYZE."""
    import psycopg

    t = time.perf_counter()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO responses_api_response SELECT (jsonb_populate_record(NULL::responses_api_response, "
            "to_jsonb(r) || jsonb_build_object("
            "'id', 'fill_' || g, 'previous_response_id', NULL))).* "
            "FROM responses_api_response r, generate_series(1, %s) g WHERE r.id = %s",
            (rows, template_response),
        )
        conn.execute(
            "INSERT INTO responses_api_item SELECT (jsonb_populate_record(NULL::responses_api_item, to_jsonb(i) || "
            "jsonb_build_object('id', nextval(pg_get_serial_sequence('responses_api_item', 'id')), "
            "'public_id', 'fill_' || g))).* "
            "FROM (SELECT * FROM responses_api_item ORDER BY id LIMIT 1) i, generate_series(1, %s) g",
            (rows,),
        )
        conn.execute(
            "INSERT INTO responses_api_responseitem SELECT (jsonb_populate_record(NULL::responses_api_responseitem, "
            "to_jsonb(ri) || jsonb_build_object("
            "'id', nextval(pg_get_serial_sequence('responses_api_responseitem', 'id')), "
            "'response_id', 'fill_' || g))).* "
            "FROM responses_api_responseitem ri, generate_series(1, %s) g WHERE ri.response_id = %s",
            (rows, template_response),
        )
        conn.execute("ANALYZE")
        counts = {
            t_: conn.execute(f"SELECT count(*) FROM {t_}").fetchone()[0]
            for t_ in ("responses_api_response", "responses_api_item", "responses_api_responseitem")
        }
    c.log(f"filled the database in {time.perf_counter() - t:.1f}s: {counts}")
    return counts


def explain_chain(db_url: str, head: str) -> str:
    """EXPLAIN ANALYZE of the chain query (selectors.CHAIN_ITEMS_SQL) for one head."""
    import psycopg

    from responses_api.store.selectors import CHAIN_ITEMS_SQL, CHAIN_SELECT, CHAIN_STEP_SQL

    response = '"responses_api_response"'
    sql = CHAIN_ITEMS_SQL.format(
        step=CHAIN_STEP_SQL["postgresql"].format(response=response),
        response=response,
        response_item='"responses_api_responseitem"',
        item='"responses_api_item"',
        select=CHAIN_SELECT["postgresql"],
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("EXPLAIN ANALYZE " + sql, (head,))
        return "\n".join(r[0] for r in conn.execute("EXPLAIN ANALYZE " + sql, (head,)).fetchall())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1,10,100,500")
    ap.add_argument("--samples", type=int, default=30, help="HTTP creates per chain length")
    ap.add_argument("--repeats", type=int, default=20, help="in-process repetitions per chain length")
    ap.add_argument("--latency", type=float, default=0.0, help="upstream latency (s)")
    ap.add_argument("--fill", type=int, default=50000, help="other responses added before the second pass (0: none)")
    args = ap.parse_args()
    lengths = sorted(int(x) for x in args.lengths.split(","))
    c.use_uvloop()
    t_begin = time.perf_counter()
    d = c.run_dir("chain")
    pg = c.start_postgres(d)
    up = c.Upstream(latency=args.latency, log_dir=d)
    gw = c.Gateway(
        db_url=pg.url, providers={"local": up.base_url}, models={"bench-model": ("local", "echo")}, log_dir=d
    )
    heads, build_ms = asyncio.run(build_http_chain(gw, lengths))
    http_small = asyncio.run(over_http(gw, up, heads, lengths, args.samples, "small_db"))
    inproc = in_process(pg.url, lengths, args.repeats)  # sets up Django in this process
    plans = {"small_db": explain_chain(pg.url, heads[max(lengths)])}
    fill_counts: dict = {}
    http_filled = inproc_filled = {}
    if args.fill:
        fill_counts = fill_database(pg.url, heads[lengths[0]], args.fill)
        plans["filled_db"] = explain_chain(pg.url, heads[max(lengths)])
        http_filled = asyncio.run(over_http(gw, up, heads, lengths, args.samples, "filled_db"))
        inproc_filled = in_process_measure(lengths, args.repeats)

    first, last = str(lengths[0]), str(lengths[-1])
    states = {"small_db": (http_small, inproc)}
    if args.fill:
        states["filled_db"] = (http_filled, inproc_filled)
    headline: dict = {}
    targets: dict = {}
    for state, (http, ip) in states.items():
        ratio = http[last]["create_ms"]["median"] / http[first]["create_ms"]["median"]
        queries = {n: ip[n]["response_begin_queries"] for n in ip}
        headline[state] = {
            "response_begin_queries_by_length": queries,
            "input_items_queries_by_length": {n: ip[n]["input_items_queries"] for n in ip},
            "create_p50_ms_by_length": {n: http[n]["create_ms"]["median"] for n in http},
            f"create_p50_ratio_len{last}_over_len{first}": round(ratio, 2),
            "input_items_p50_ms_by_length": {n: http[n]["input_items_ms"]["median"] for n in http},
        }
        targets[state] = {
            "chain_rebuild_query_count_constant": len(set(queries.values())) == 1,
            f"create_latency_len{last}_within_3x_len{first}": ratio <= 3.0,
        }
        print()
        print(
            f"[{state}] length  begin-queries  begin-ms(in-process)  create-p50-ms(HTTP)  create-p99-ms"
            f"  upstream-alone-p50-ms  input_items-queries  input_items-p50-ms"
        )
        for n in map(str, lengths):
            print(
                f"{'':>{len(state) + 2}} {n:>6}  {ip[n]['response_begin_queries']:>13}"
                f"  {ip[n]['response_begin_ms']['median']:>20}  {http[n]['create_ms']['median']:>19}"
                f"  {http[n]['create_ms']['p99']:>13}  {http[n]['direct_upstream_same_messages_ms']['median']:>21}"
                f"  {ip[n]['input_items_queries']:>19}  {http[n]['input_items_ms']['median']:>18}"
            )
        print(f"  create latency ratio length {last} / length {first}: {ratio:.2f} (target <= 3)")
        for k, v in targets[state].items():
            print(f"  target {k}: {'met' if v else 'MISSED'}")
    print()
    c.write_result(
        "chain",
        {
            "args": vars(args),
            "headline": headline,
            "targets": targets,
            "fill_counts": fill_counts,
            "build_chain_over_http_ms": c.summary(build_ms, 1),
            "in_process": {"small_db": inproc, "filled_db": inproc_filled if args.fill else None},
            "http": {"small_db": http_small, "filled_db": http_filled if args.fill else None},
            "chain_query_plans_len_max": plans,
            "runtime_s": round(time.perf_counter() - t_begin, 1),
        },
    )
    plot(lengths, states)
    gw.stop()
    up.stop()
    pg.stop()


def plot(lengths: list[int], states: dict) -> None:
    plt = c.pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax = axes[0]
    for state, (http, _) in states.items():
        ax.plot(lengths, [http[str(n)]["create_ms"]["median"] for n in lengths], "o-", label=f"create p50 ({state})")
        ax.plot(
            lengths,
            [http[str(n)]["input_items_ms"]["median"] for n in lengths],
            "^-",
            label=f"GET input_items p50 ({state})",
        )
    http = next(iter(states.values()))[0]
    ax.plot(
        lengths,
        [http[str(n)]["direct_upstream_same_messages_ms"]["median"] for n in lengths],
        "s:",
        label="upstream alone, same messages, p50",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chain length (turns)")
    ax.set_ylabel("ms")
    ax.set_title("HTTP latency vs chain length")
    ax.legend(fontsize=7)
    ax = axes[1]
    for state, (_, ip) in states.items():
        ax.plot(
            lengths, [ip[str(n)]["response_begin_queries"] for n in lengths], "o-", label=f"response_begin ({state})"
        )
        ax.plot(lengths, [ip[str(n)]["input_items_queries"] for n in lengths], "^--", label=f"input_items ({state})")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("chain length (turns)")
    ax.set_ylabel("SQL queries")
    ax.set_title("queries vs chain length")
    ax.legend(fontsize=7)
    c.save_plot(fig, "chain")


if __name__ == "__main__":
    main()
