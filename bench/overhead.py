"""Overhead: the scripted upstream called directly, through this gateway and through LiteLLM's proxy.

One run, the three targets alternating (request by request for latency,
round by round for throughput), so drift on the machine hits all alike:

1. non-streaming latency: N sequential creates per target (default 100);
   added latency = target minus direct for the same iteration i;
2. streaming: M sequential streamed creates per target (default 200); time to
   the first SSE `data:` event (TTFE) and to the end of the stream, added =
   target minus direct for the same iteration;
3. throughput (requests/s, non-streaming) at concurrency 1, 16 and 64, each
   cell bounded by duration and a request cap, with the CPU used by every
   process (the load generator included) during the cell.

The load generator is this process (asyncio + uvloop + a raw HTTP/1.1 client
on httptools, see common.RawHttp); the servers are child processes. The
direct-upstream throughput is the ceiling the generator and upstream reach
together; the generator's CPU share is printed next to every cell.

    /tmp/venv/bin/python bench/overhead.py [--latency 0.02] [--requests 100] [--streams 200]

`--guarded` adds the target 'guarded' (guardrails on every request, bench/overhead.py
`guarded_config`) beside 'gateway' (none): their CPU per request and added latency side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c

PROMPT = "Say hello to the benchmark."


class Target:
    def __init__(
        self,
        name: str,
        base: str,
        headers: dict[str, str],
        *,
        direct: bool,
        pid: int | None,
        extra: dict | None = None,
    ) -> None:
        self.name = name
        self.base = base
        self.headers = headers
        self.direct = direct
        self.pid = pid
        if direct:
            self.path = "/chat/completions"
            msg = {"model": "echo", "messages": [{"role": "user", "content": PROMPT}]}
            self.body = json.dumps(msg).encode()
            self.stream_body = json.dumps({**msg, "stream": True}).encode()
        else:
            self.path = "/responses"
            req = {"model": "bench-model", "input": PROMPT, **(extra or {})}
            self.body = json.dumps(req).encode()
            self.stream_body = json.dumps({**req, "stream": True}).encode()

    def client(self) -> c.RawHttp:
        return c.RawHttp(self.base, self.headers)

    def check(self, res: c.Result, stream: bool) -> None:
        if not res.ok:
            raise RuntimeError(f"{self.name}: request failed: {res.status} {res.error} {(res.body or b'')[:300]!r}")
        if stream and res.t_first_event is None:
            raise RuntimeError(f"{self.name}: stream without a data event")


def guarded_config() -> list[dict]:
    """The guardrails of the target 'guarded' (issue 58's cost check): a patterns guardrail and a
    credentials guardrail, `block`, on all traffic; on the input, and on the model's output where
    this tree serves output guardrails. The benchmark's text matches neither (the common case: every
    detector runs to the end), so every request still reaches the upstream."""
    from responses_api.protocol.guardrails import SERVED_APPLIES_TO

    kinds = [
        ("codenames", "patterns", {"categories": {"codename": {"words": ["Project Zeus"], "regex": ["ZX-\\d{4}"]}}}),
        ("credentials", "pii", {"categories": ["credential"]}),
    ]
    return [
        {"name": f"{name}-{where}", "kind": kind, "action": "block", "applies_to": where, "config": config}
        for where in ("input", "output")
        if where in SERVED_APPLIES_TO
        for name, kind, config in kinds
    ]


def rotated(targets: list[Target], i: int) -> list[Target]:
    k = i % len(targets)
    return targets[k:] + targets[:k]


async def sequential(targets: list[Target], n: int, *, stream: bool, warmup: int) -> dict[str, list[c.Result]]:
    clients = {t.name: t.client() for t in targets}
    for t in targets:  # warm-up, not recorded
        for _ in range(warmup):
            res = await clients[t.name].request(
                "POST", t.path, t.stream_body if stream else t.body, sse=stream, keep_body=True
            )
            t.check(res, stream)
    out: dict[str, list[c.Result]] = {t.name: [] for t in targets}
    for i in range(n):
        for t in rotated(targets, i):
            res = await clients[t.name].request("POST", t.path, t.stream_body if stream else t.body, sse=stream)
            if not res.ok:
                res = await clients[t.name].request(
                    "POST", t.path, t.stream_body if stream else t.body, sse=stream, keep_body=True
                )
                t.check(res, stream)
            out[t.name].append(res)
    for cl in clients.values():
        cl.close()
    return out


async def load(t: Target, concurrency: int, duration: float, cap: int) -> dict:
    """`concurrency` workers, one keep-alive connection each, until `duration` s or `cap` requests."""
    latencies: list[float] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal errors, issued
        cl = t.client()
        try:
            while time.perf_counter() < deadline and issued < cap:
                issued += 1
                res = await cl.request("POST", t.path, t.body, timeout=30)
                if res.ok:
                    latencies.append(res.total)
                else:
                    errors += 1
        finally:
            cl.close()

    pids = {"upstream": UPSTREAM_PID}
    if t.pid is not None and not t.direct:
        pids[t.name] = t.pid
    if PG_PID:
        pids["postgres"] = PG_PID
    meter = c.CpuMeter(pids).start()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    cpu = meter.stop()
    return {"latencies": latencies, "errors": errors, "elapsed": elapsed, "cpu": cpu}


UPSTREAM_PID = 0
PG_PID = 0


def added(target: list[c.Result], direct: list[c.Result], attr: str) -> list[float]:
    vals = []
    for a, b in zip(target, direct):
        x, y = getattr(a, attr), getattr(b, attr)
        if x is not None and y is not None:
            vals.append(x - y)
    return vals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.02, help="upstream latency in seconds (default 0.02)")
    ap.add_argument("--requests", type=int, default=100, help="sequential non-streaming requests per target")
    ap.add_argument("--streams", type=int, default=200, help="sequential streamed requests per target")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per target per round, per concurrency")
    ap.add_argument("--rounds", type=int, default=2, help="throughput rounds (target order reversed each round)")
    ap.add_argument("--cap", type=int, default=20000, help="max requests per throughput cell")
    ap.add_argument("--no-litellm", action="store_true")
    ap.add_argument(
        "--no-nostore", action="store_true", help="skip the target 'nostore' (this gateway, store: false requests)"
    )
    ap.add_argument(
        "--baseline",
        metavar="REV",
        default="",
        help="also run the gateway of git commit REV (target 'baseline'): before/after in one run",
    )
    ap.add_argument(
        "--limited",
        action="store_true",
        help="also run this tree with Redis and rate limits on the key's tenant that never bind "
        "(target 'limited'): the cost of counting",
    )
    ap.add_argument(
        "--guarded",
        action="store_true",
        help="also run this tree with guardrails on every request (target 'guarded'): a patterns and a "
        "credentials (pii) guardrail on the input, and on the output where this tree serves output guardrails",
    )
    ap.add_argument(
        "--py-spy", action="store_true", help="record a py-spy profile of the gateway during its concurrency-64 cell"
    )
    args = ap.parse_args()
    concurrencies = [int(x) for x in args.concurrency.split(",")]
    c.raise_nofile()
    loop_kind = c.use_uvloop()
    t_begin = time.perf_counter()

    d = c.run_dir("overhead")
    global UPSTREAM_PID, PG_PID
    pg = c.start_postgres(d)
    PG_PID = pg.pid
    up = c.Upstream(latency=args.latency, log_dir=d)
    UPSTREAM_PID = up.proc.pid
    gw = c.Gateway(
        db_url=pg.url, providers={"local": up.base_url}, models={"bench-model": ("local", "echo")}, log_dir=d
    )
    targets = [
        Target("direct", up.base_url, {}, direct=True, pid=up.proc.pid),
        Target("gateway", f"{gw.url}/v1", gw.headers, direct=False, pid=gw.proc.pid),
    ]
    if not args.no_nostore:
        # The same process answering `store: false` requests: like with like against LiteLLM,
        # which stores nothing either.
        targets.append(
            Target("nostore", f"{gw.url}/v1", gw.headers, direct=False, pid=gw.proc.pid, extra={"store": False})
        )
    base_gw = None
    if args.baseline:
        tree = c.source_tree(args.baseline, d / "baseline-tree")
        base_gw = c.Gateway(
            db_url=c.create_database(pg.url, "baseline"),
            providers={"local": up.base_url},
            models={"bench-model": ("local", "echo")},
            log_dir=d,
            name="baseline",
            tree=tree,
        )
        targets.append(Target("baseline", f"{base_gw.url}/v1", base_gw.headers, direct=False, pid=base_gw.proc.pid))
    limited_gw = None
    if args.limited:
        from tests.support.servers import start_redis

        redis_server = start_redis(d)
        limited_gw = c.Gateway(
            db_url=c.create_database(pg.url, "limited"),
            providers={},
            models={},
            log_dir=d,
            name="limited",
            extra_env={"REDIS_URL": redis_server.url},
            config={
                "providers": [{"name": "local", "kind": "chat_completions", "base_url": up.base_url}],
                "models": [{"name": "bench-model", "targets": [{"provider": "local", "model": "echo"}]}],
                "tenants": [
                    {
                        "name": "bench",
                        "requests_per_minute": 10**9,
                        "tokens_per_minute": 10**9,
                        "max_concurrent_requests": 10**6,
                    }
                ],
            },
        )
        targets.append(
            Target("limited", f"{limited_gw.url}/v1", limited_gw.headers, direct=False, pid=limited_gw.proc.pid)
        )
    guarded_gw = None
    if args.guarded:
        guarded_gw = c.Gateway(
            db_url=c.create_database(pg.url, "guarded"),
            providers={},
            models={},
            log_dir=d,
            name="guarded",
            config={
                "providers": [{"name": "local", "kind": "chat_completions", "base_url": up.base_url}],
                "models": [{"name": "bench-model", "targets": [{"provider": "local", "model": "echo"}]}],
                "guardrails": guarded_config(),
            },
        )
        targets.append(
            Target("guarded", f"{guarded_gw.url}/v1", guarded_gw.headers, direct=False, pid=guarded_gw.proc.pid)
        )
    litellm_note = ""
    ll = None
    if not args.no_litellm:
        exe = c.ensure_litellm()
        if exe is None:
            litellm_note = "LiteLLM skipped: install failed"
        else:
            try:
                ll = c.LiteLLM(exe, upstream_base=up.base_url, log_dir=d)
                targets.append(Target("litellm", f"{ll.url}/v1", ll.headers, direct=False, pid=ll.proc.pid))
            except RuntimeError as exc:
                litellm_note = f"LiteLLM skipped: it did not start ({str(exc)[:300]})"
    else:
        litellm_note = "LiteLLM skipped (--no-litellm)"
    if litellm_note:
        c.log(litellm_note)
    names = [t.name for t in targets]
    proxies = [n for n in names if n != "direct"]

    all_pids = (
        {"upstream": up.proc.pid, "gateway": gw.proc.pid, "postgres": pg.pid}
        | ({"litellm": ll.proc.pid} if ll else {})
        | ({"baseline": base_gw.proc.pid} if base_gw else {})
        | ({"limited": limited_gw.proc.pid} if limited_gw else {})
        | ({"guarded": guarded_gw.proc.pid} if guarded_gw else {})
    )
    c.log(f"non-streaming: {args.requests} sequential requests per target, alternating {names}")
    meter = c.CpuMeter(all_pids).start()
    seq = asyncio.run(sequential(targets, args.requests, stream=False, warmup=args.warmup))
    cpu_seq = meter.stop()
    c.log(f"streaming: {args.streams} sequential streamed requests per target")
    meter = c.CpuMeter(all_pids).start()
    st = asyncio.run(sequential(targets, args.streams, stream=True, warmup=args.warmup // 2))
    cpu_st = meter.stop()
    c.log(f"CPU during the sequential phases (cores): non-streaming {cpu_seq}; streaming {cpu_st}")

    results: dict = {
        "non_streaming": {},
        "streaming": {},
        "throughput": {},
        "cpu_cores_sequential": {"non_streaming": cpu_seq, "streaming": cpu_st},
    }
    for n in names:
        results["non_streaming"][n] = {"latency_ms": c.summary([r.total for r in seq[n]], 1000)}
        results["streaming"][n] = {
            "ttfe_ms": c.summary([r.ttfe for r in st[n] if r.ttfe is not None], 1000),
            "total_ms": c.summary([r.total for r in st[n]], 1000),
            "events_per_stream": c.summary([r.events for r in st[n]], 1, 1),
        }
    for n in proxies:
        results["non_streaming"][n]["added_ms"] = c.summary(added(seq[n], seq["direct"], "total"), 1000)
        results["streaming"][n]["added_ttfe_ms"] = c.summary(added(st[n], st["direct"], "ttfe"), 1000)
        results["streaming"][n]["added_total_ms"] = c.summary(added(st[n], st["direct"], "total"), 1000)

    # Throughput: each concurrency, `rounds` rounds, target order rotating.
    profile_path = None
    for conc in concurrencies:
        cells: dict[str, list[dict]] = {n: [] for n in names}
        for rnd in range(args.rounds):
            order = rotated(targets, rnd) if rnd % 2 == 0 else list(reversed(rotated(targets, rnd)))
            for t in order:
                spy = None
                if args.py_spy and t.name == "gateway" and conc == max(concurrencies) and rnd == 0:
                    profile_path = c.RESULTS / "overhead-gateway-c64.speedscope.json"
                    c.RESULTS.mkdir(parents=True, exist_ok=True)
                    spy = subprocess.Popen(
                        [
                            "py-spy",
                            "record",
                            "-p",
                            str(t.pid),
                            "-r",
                            "250",
                            "-d",
                            str(int(args.duration) + 1),
                            "-f",
                            "speedscope",
                            "-o",
                            str(profile_path),
                            "--nonblocking",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                cells[t.name].append(asyncio.run(load(t, conc, args.duration, args.cap)))
                if spy is not None:
                    try:
                        spy.wait(timeout=args.duration + 30)
                    except subprocess.TimeoutExpired:
                        spy.kill()
                time.sleep(0.3)
        row = {}
        for n in names:
            lat = [x for cell in cells[n] for x in cell["latencies"]]
            elapsed = sum(cell["elapsed"] for cell in cells[n])
            errors = sum(cell["errors"] for cell in cells[n])
            cpu: dict[str, float] = {}
            for cell in cells[n]:
                for k, v in cell["cpu"].items():
                    cpu[k] = round(cpu.get(k, 0.0) + v / len(cells[n]), 3)
            row[n] = {
                "requests": len(lat),
                "errors": errors,
                "seconds": round(elapsed, 2),
                "rps": round(len(lat) / elapsed, 1) if elapsed else 0.0,
                "latency_ms": c.summary(lat, 1000),
                "cpu_cores": cpu,
            }
        for n in proxies:
            row[n]["added_p50_ms"] = round(row[n]["latency_ms"]["median"] - row["direct"]["latency_ms"]["median"], 3)
            row[n]["added_p99_ms"] = round(row[n]["latency_ms"]["p99"] - row["direct"]["latency_ms"]["p99"], 3)
            row[n]["cpu_ms_per_request"] = cpu_per_request(row[n], n)
        results["throughput"][str(conc)] = row
        c.log(
            f"concurrency {conc}: "
            + ", ".join(
                f"{n} {row[n]['rps']} req/s (p50 {row[n]['latency_ms']['median']} ms, p99 {row[n]['latency_ms']['p99']} ms,"
                f" err {row[n]['errors']}, generator {row[n]['cpu_cores'].get('generator_cores')} cores)"
                for n in names
            )
        )

    # Headline figures.
    gw_ns = results["non_streaming"]["gateway"]["added_ms"]
    gw_st = results["streaming"]["gateway"]["added_ttfe_ms"]
    headline = {
        "median_added_latency_non_streaming_ms": gw_ns["median"],
        "p99_added_latency_non_streaming_ms": gw_ns["p99"],
        "added_ttfe_median_ms": gw_st["median"],
        "added_ttfe_p99_ms": gw_st["p99"],
    }
    top = str(max(concurrencies))
    tp = results["throughput"].get(top, {})
    targets_check = {
        "added_median_latency_le_3ms": gw_ns["median"] <= 3.0,
        "added_median_ttfe_le_2ms": gw_st["median"] <= 2.0,
    }
    if "litellm" in tp:
        ratio = tp["gateway"]["rps"] / tp["litellm"]["rps"] if tp["litellm"]["rps"] else float("inf")
        headline[f"throughput_ratio_gateway_over_litellm_c{top}"] = round(ratio, 2)
        targets_check[f"throughput_c{top}_ge_2x_litellm"] = ratio >= 2.0
        targets_check[f"p99_added_c{top}_lower_than_litellm"] = (
            tp["gateway"]["added_p99_ms"] < tp["litellm"]["added_p99_ms"]
        )
        if "nostore" in tp:  # performance round 5a (issue 40): like with like, per unit of CPU
            for k, row in results["throughput"].items():
                ours, theirs = (
                    row["nostore"]["cpu_ms_per_request"]["process"],
                    row["litellm"]["cpu_ms_per_request"]["process"],
                )
                if ours and theirs:
                    headline[f"cpu_per_request_litellm_over_nostore_c{k}"] = round(theirs / ours, 2)
                    if k != "1":
                        targets_check[f"nostore_cpu_per_request_c{k}_le_1/15_litellm"] = ours * 15 <= theirs
            if tp["litellm"]["rps"]:
                nostore_ratio = tp["nostore"]["rps"] / tp["litellm"]["rps"]
                headline[f"throughput_ratio_nostore_over_litellm_c{top}"] = round(nostore_ratio, 2)
                targets_check[f"nostore_throughput_c{top}_ge_10x_litellm"] = nostore_ratio >= 10
        ll_ttfe = results["streaming"]["litellm"]["added_ttfe_ms"]["median"]
        targets_check["added_ttfe_le_1/10_litellm"] = gw_st["median"] * 10 <= ll_ttfe

    print()
    print(
        f"median added latency of a non-streaming create ({args.requests} sequential): "
        f"{gw_ns['median']:.2f} ms (p99 {gw_ns['p99']:.2f} ms)"
    )
    print(
        f"added time-to-first-event median & p99 ({args.streams} streamed): "
        f"{gw_st['median']:.2f} ms / {gw_st['p99']:.2f} ms"
    )
    if "litellm" in results["non_streaming"]:
        ll_ns = results["non_streaming"]["litellm"]["added_ms"]
        ll_st = results["streaming"]["litellm"]["added_ttfe_ms"]
        print(
            f"  (LiteLLM: added latency median {ll_ns['median']:.2f} ms, p99 {ll_ns['p99']:.2f} ms; "
            f"added TTFE median {ll_st['median']:.2f} ms, p99 {ll_st['p99']:.2f} ms)"
        )
    if "baseline" in results["non_streaming"]:
        b_ns = results["non_streaming"]["baseline"]["added_ms"]
        b_st = results["streaming"]["baseline"]["added_ttfe_ms"]
        print(
            f"  (baseline {args.baseline}: added latency median {b_ns['median']:.2f} ms, p99 {b_ns['p99']:.2f} ms;"
            f" added TTFE median {b_st['median']:.2f} ms, p99 {b_st['p99']:.2f} ms; "
            + ", ".join(
                f"c={k} {row['baseline']['rps']} vs {row['gateway']['rps']} req/s"
                for k, row in results["throughput"].items()
            )
            + ")"
        )
    print("CPU per request (ms; the target's process, and PostgreSQL's beside it):")
    for k, row in results["throughput"].items():
        print(
            f"  c={k}: "
            + ", ".join(
                f"{n} {row[n]['cpu_ms_per_request']['process']}"
                + (
                    f" (+pg {row[n]['cpu_ms_per_request']['postgres']})"
                    if row[n]["cpu_ms_per_request"]["postgres"]
                    else ""
                )
                for n in proxies
            )
        )
    for k, v in targets_check.items():
        print(f"  target {k}: {'met' if v else 'MISSED'}")
    print()

    data = {
        "args": vars(args),
        "generator_loop": loop_kind,
        "litellm_note": litellm_note,
        "litellm_version": _litellm_version() if ll else None,
        "headline": headline,
        "targets": targets_check,
        **results,
        "profile": str(profile_path.relative_to(c.REPO)) if profile_path and profile_path.exists() else None,
        "notes": [
            (
                "gateway: uvicorn (uvloop, httptools), DEBUG=0, Postgres (psycopg pool), store=true: every "
                "response is written to Postgres (begin + finish)"
            ),
            (
                "litellm: proxy with one uvicorn worker, master key, no database: it stores nothing "
                "(no spend logs, previous_response_id unavailable)"
            ),
            "throughput cells are non-streaming; all processes share the machine's cores",
        ],
        "runtime_s": round(time.perf_counter() - t_begin, 1),
    }
    c.write_result("overhead", data)
    plot(results, names, proxies, seq, st)
    for srv in (ll, gw, base_gw, limited_gw, guarded_gw, up):
        if srv is not None:
            srv.stop()
    pg.stop()


def cpu_per_request(cell: dict, name: str) -> dict[str, float | None]:
    """CPU milliseconds per request of a throughput cell: the target's process, and PostgreSQL's
    (None where the target writes nothing there: LiteLLM, `store: false`)."""
    rps = cell["rps"]
    cores = cell["cpu_cores"]
    if not rps:
        return {"process": None, "postgres": None}
    process = cores.get(f"{name}_cores")
    postgres = cores.get("postgres_cores") if name not in ("litellm", "nostore") else None
    return {
        "process": round(process / rps * 1000, 3) if process is not None else None,
        "postgres": round(postgres / rps * 1000, 3) if postgres is not None else None,
    }


def _litellm_version() -> str | None:
    pip = c.litellm_venv() / "bin" / "pip"
    try:
        out = subprocess.run(
            [str(pip), "show", "litellm"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Version:")), None)


def plot(results: dict, names: list[str], proxies: list[str], seq: dict, st: dict) -> None:
    plt = c.pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    data = [[x * 1000 for x in added(seq[n], seq["direct"], "total")] for n in proxies]
    ax.boxplot(data, tick_labels=proxies, showfliers=True)
    ax.set_title("added latency, non-streaming (ms)")
    ax.set_yscale("symlog")
    ax = axes[1]
    data = [[x * 1000 for x in added(st[n], st["direct"], "ttfe")] for n in proxies]
    ax.boxplot(data, tick_labels=proxies, showfliers=True)
    ax.set_title("added time to first event (ms)")
    ax.set_yscale("symlog")
    ax = axes[2]
    concs = list(results["throughput"])
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        ax.bar(
            [j + i * width for j in range(len(concs))],
            [results["throughput"][k][n]["rps"] for k in concs],
            width,
            label=n,
        )
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(concs))], [f"c={k}" for k in concs])
    ax.set_title("throughput (req/s, non-streaming)")
    ax.legend()
    c.save_plot(fig, "overhead")


if __name__ == "__main__":
    main()
