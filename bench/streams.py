"""Concurrent slow streams: how many one gateway process holds with p99 added inter-event delay < 50 ms.

Every stream is a streamed create whose upstream sends one token (4 chars)
every 100 ms. For each level N (default 100, 250, 500, 1000, 1500):

1. ramp: streams are opened as fast as the gateway accepts them (at most
   --max-opening creates waiting for their first token at once, so the ramp
   adapts to the gateway instead of queueing thousands of creates);
2. hold: once all N streams have received their first token, every stream
   stays open for --hold seconds (the measurement window: N simultaneous
   streams, no creates in flight); at 100 ms per token that is ~30 tokens per
   stream in the window (--hold 3);
3. the client disconnects all N streams (the gateway cancels the upstream
   calls and stores them as cancelled) and waits for the gateway to go idle.

Added inter-event delay = gap between consecutive `response.output_text.delta`
events of a stream - 100 ms, over every stream, inside the window ("window") and
from each stream's first token to the end of the window, ramp included ("all").
The same procedure against the upstream processes directly (--direct-levels)
shows what the upstreams and the load generator add by themselves here.

Memory: the gateway's VmRSS in the window minus its RSS before the level,
divided by N (and the same against its idle RSS after warm-up).

Processes: one gateway (uvicorn, production settings) whose route spreads
over --upstreams upstream processes, Postgres and this load generator
(asyncio + uvloop + raw HTTP client): all share the machine's cores. The
upstreams are bench/lean_upstream.py unless --upstream scripted (the tests'
scripted upstream, 3.5 times the CPU): a model server runs on
machines of its own, and on two cores every cycle the stand-in spends is one
the gateway under test does not get.

    /tmp/venv/bin/python bench/streams.py [--levels 100,250,500,1000,1500] [--hold 3]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c

GW_DELTA = b"response.output_text.delta"
UP_DELTA = b'"delta":{"content":"'
TOKENS = 0  # upstream stream length (set in main): longer than any ramp + hold; the client ends the streams


async def run_level(
    n: int,
    targets: list[tuple[str, dict[str, str], str, bytes]],
    args: argparse.Namespace,
    rss_pid: int | None,
    cpu_pids: dict[str, int],
    profile_pid: int | None = None,
) -> dict:
    match = GW_DELTA if targets[0][2] == "/responses" else UP_DELTA
    times: list[list[float]] = [[] for _ in range(n)]
    starts: list[float] = [0.0] * n
    clients: list[c.RawHttp] = []
    tasks: list[asyncio.Task] = []
    done_early: list[c.Result] = []

    async def stream(i: int) -> None:
        base, headers, path, body = targets[i % len(targets)]
        cl = c.RawHttp(base, headers)
        clients.append(cl)
        starts[i] = time.perf_counter()
        res = await cl.request(
            "POST", path, body, sse=True, match=match, times=times[i], timeout=TOKENS * args.interval + 60
        )
        done_early.append(res)  # a stream should never end by itself before we close it

    rss_before = c.rss_bytes(rss_pid) if rss_pid else 0
    meter = c.CpuMeter(cpu_pids).start()
    t0 = time.perf_counter()
    ramp_deadline = t0 + args.max_ramp
    started = 0
    first_tokens = 0
    # Ramp: bounded by count (n) and time (--max-ramp).
    for _ in range(int(args.max_ramp / 0.002) + n):
        if time.perf_counter() > ramp_deadline:
            break
        first_tokens = sum(1 for t in times[:started] if t)
        if first_tokens >= n:
            break
        if started < n and started - first_tokens < args.max_opening:
            tasks.append(asyncio.ensure_future(stream(started)))
            started += 1
            continue
        await asyncio.sleep(0.002)
    ramp_s = time.perf_counter() - t0
    all_open = first_tokens >= n and not done_early
    # Hold: the measurement window.
    ramp_meter = meter.stop()
    meter = c.CpuMeter(cpu_pids).start()
    w_start = time.perf_counter()
    spy = None
    if profile_pid:
        import profile_gateway

        exe = profile_gateway.py_spy()
        raw = c.run_dir("streams-spy") / "gateway.raw"
        if exe:
            spy = subprocess.Popen(  # noqa: ASYNC220 - starting py-spy takes no time: a blocking Popen is fine
                [
                    exe,
                    "record",
                    "-p",
                    str(profile_pid),
                    "--gil",
                    "-r",
                    "100",
                    "-d",
                    str(max(1, int(args.hold))),
                    "-f",
                    "raw",
                    "-o",
                    str(raw),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
    rss_samples = []
    for _ in range(max(1, int(args.hold / 0.25))):
        await asyncio.sleep(0.25)
        if rss_pid:
            rss_samples.append(c.rss_bytes(rss_pid))
    w_end = time.perf_counter()
    window_cpu = meter.stop()
    cpu = _combined(ramp_meter, window_cpu)
    profile = None
    if spy is not None:
        try:
            spy.wait(timeout=args.hold + 30)
        except subprocess.TimeoutExpired:
            spy.kill()
        if raw.exists():
            text, profile = profile_gateway.aggregate(raw, 25)
            (c.RESULTS / f"profile-streams-{n}.txt").write_text(
                f"gateway during the hold window of {n} streams (on-CPU, py-spy --gil)\n\n{text}\n"
            )
            c.log(f"wrote bench/results/profile-streams-{n}.txt")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for cl in clients:
        cl.close()

    gaps_window: list[float] = []
    gaps_all: list[float] = []
    events_in_window: list[int] = []
    for ts in times:
        inside = [t for t in ts if w_start <= t <= w_end]
        events_in_window.append(len(inside))
        for a, b in itertools.pairwise(ts):
            if b > w_end:
                break
            gaps_all.append(b - a - args.interval)
            if a >= w_start:
                gaps_window.append(b - a - args.interval)
    ttfe = [ts[0] - st for ts, st in zip(times, starts) if ts and st]
    # CPU per relayed event (the window: every stream open, no creates in flight) and per opened
    # stream (the ramp's CPU less what relaying the ramp's events cost at the window's rate).
    relayed_window = sum(events_in_window)
    relayed_ramp = sum(1 for ts in times for t in ts if t < w_start)
    per_event_us = per_stream_ms = None
    window_cores = window_cpu.get("gateway_cores")
    if window_cores is not None and relayed_window:
        per_event_us = window_cores * window_cpu["wall_s"] / relayed_window * 1e6
        ramp_cores = ramp_meter.get("gateway_cores", 0.0)
        ramp_cpu_s = ramp_cores * ramp_meter["wall_s"] - per_event_us / 1e6 * relayed_ramp
        per_stream_ms = max(ramp_cpu_s, 0.0) / max(started, 1) * 1000
    rss_peak = max(rss_samples) if rss_samples else 0
    return {
        "streams": n,
        "all_open": all_open,
        "opened": started,
        "with_first_token": first_tokens,
        "ended_early": len(done_early),
        "ended_early_samples": [r.error or r.status for r in done_early[:3]],
        "ramp_s": round(ramp_s, 2),
        "open_rate_per_s": round(started / ramp_s, 1) if ramp_s else None,
        "window_s": round(w_end - w_start, 2),
        "added_inter_event_ms_window": c.summary(gaps_window, 1000),
        "added_inter_event_ms_all": c.summary(gaps_all, 1000),
        "events_per_stream_in_window": c.summary(events_in_window, 1, 1),
        "ttfe_ms": c.summary(ttfe, 1000),
        "rss_before_mb": round(rss_before / 2**20, 1),
        "rss_window_mb": round(rss_peak / 2**20, 1),
        # per stream actually open (a level that could not open all N divides by those open)
        "rss_per_stream_kb": round((rss_peak - rss_before) / max(first_tokens, 1) / 1024, 1) if rss_pid else None,
        "cpu_cores_ramp_and_window": cpu,
        "cpu_cores_window": window_cpu,
        "cpu_us_per_relayed_event": round(per_event_us, 1) if per_event_us is not None else None,
        "cpu_ms_per_opened_stream": round(per_stream_ms, 3) if per_stream_ms is not None else None,
        "profile_categories": profile["categories"] if profile else None,
    }


def _combined(first: dict[str, float], second: dict[str, float]) -> dict[str, float]:
    """Two consecutive CpuMeter readings as one over both spans (cores weighted by wall time)."""
    wall = first["wall_s"] + second["wall_s"]
    out = {
        key: round((first.get(key, 0.0) * first["wall_s"] + second.get(key, 0.0) * second["wall_s"]) / wall, 3)
        for key in first.keys() | second.keys()
        if key != "wall_s"
    }
    return out | {"wall_s": round(wall, 3)}


def wait_idle(pid: int, timeout: float = 60.0) -> float:
    """Wait (bounded) until the process uses < 5% of a core over 0.5 s; returns the seconds waited."""
    t0 = time.perf_counter()
    for _ in range(int(timeout / 0.5)):
        a = c.cpu_seconds(pid)
        time.sleep(0.5)
        if c.cpu_seconds(pid) - a < 0.025:
            break
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="100,250,500,1000,1500")
    ap.add_argument("--direct-levels", default="1000", help="levels also run against the upstreams directly")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between upstream tokens")
    ap.add_argument("--hold", type=float, default=3.0, help="seconds all N streams stay open together")
    ap.add_argument("--max-opening", type=int, default=32, help="creates waiting for their first token at once")
    ap.add_argument("--max-ramp", type=float, default=60.0, help="give up opening a level after this many s")
    ap.add_argument("--upstreams", type=int, default=2, help="upstream processes")
    ap.add_argument(
        "--upstream",
        choices=("lean", "scripted"),
        default="lean",
        help="the upstream server: bench/lean_upstream.py (default; a fraction of the CPU per chunk, "
        "so that the gateway gets the machine) or the scripted upstream of the tests (the figures "
        "before 2026-11-26 afternoon)",
    )
    ap.add_argument("--bound-ms", type=float, default=50.0, help="p99 added inter-event delay bound")
    ap.add_argument("--settings", default="", help="DJANGO_SETTINGS_MODULE for the gateway (diagnostics only)")
    ap.add_argument(
        "--web-workers",
        type=int,
        default=1,
        help="uvicorn worker processes (compose's WEB_CONCURRENCY); CPU is the whole tree's",
    )
    ap.add_argument(
        "--py-spy-level",
        type=int,
        default=0,
        help="record the gateway with py-spy during the hold window of this level",
    )
    ap.add_argument("--out", default="streams", help="results name (bench/results/<out>.json/.png)")
    ap.add_argument(
        "--baseline",
        metavar="REV",
        default="",
        help="also run every level against the gateway of git commit REV (its own database): before/after in one run",
    )
    ap.add_argument(
        "--stop-after-fail", type=int, default=3, help="stop after this many consecutive levels over the bound"
    )
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    direct_levels = {int(x) for x in args.direct_levels.split(",") if x}
    nofile = c.raise_nofile(65536)
    loop_kind = c.use_uvloop()
    t_begin = time.perf_counter()
    if nofile < 2 * max(levels) + 100:
        c.log(f"warning: open-file limit {nofile} is low for {max(levels)} streams")

    global TOKENS
    TOKENS = int((args.max_ramp + args.hold + 20) / args.interval)
    d = c.run_dir("streams")
    pg = c.start_postgres(d)
    ups = [
        c.LeanUpstream(log_dir=d, name=f"upstream{i}", interval=args.interval)
        if args.upstream == "lean"
        else c.Upstream(latency=0.0, log_dir=d, name=f"upstream{i}", slow_interval=args.interval)
        for i in range(args.upstreams)
    ]
    providers = {f"up{i}": u.base_url for i, u in enumerate(ups)}
    model = f"slow-{TOKENS}"
    config = {  # one route spread over every upstream process
        "providers": [{"name": n, "kind": "chat_completions", "base_url": u} for n, u in providers.items()],
        "models": [{"name": model, "targets": [{"provider": p, "model": model, "weight": 1} for p in providers]}],
    }
    max_conn = max(4000, 2 * max(levels))
    extra = {"GATEWAY_UPSTREAM_MAX_CONNECTIONS": str(max_conn)}
    if args.settings:
        extra |= {"DJANGO_SETTINGS_MODULE": args.settings, "PYTHONPATH": str(c.BENCH)}
    gw = c.Gateway(
        db_url=pg.url,
        providers={},
        models={},
        log_dir=d,
        config=config,
        extra_env=extra,
        uvicorn_args=["--workers", str(args.web_workers)] if args.web_workers > 1 else None,
    )
    base_gw = None
    if args.baseline:
        tree = c.source_tree(args.baseline, d / "baseline-tree")
        base_gw = c.Gateway(
            db_url=c.create_database(pg.url, "baseline"),
            providers={},
            models={},
            log_dir=d,
            config=config,
            extra_env=extra,
            name="baseline",
            tree=tree,
            uvicorn_args=["--workers", str(args.web_workers)] if args.web_workers > 1 else None,
        )
    others = {"postgres": pg.pid} | {f"upstream{i}": u.proc.pid for i, u in enumerate(ups)}

    gw_body = json.dumps({"model": model, "input": "Tell me a long story.", "stream": True}).encode()
    up_body = json.dumps(
        {"model": model, "stream": True, "messages": [{"role": "user", "content": "Tell me a long story."}]}
    ).encode()
    gw_targets = [(f"{gw.url}/v1", gw.headers, "/responses", gw_body)]
    up_targets = [(u.base_url, {}, "/chat/completions", up_body) for u in ups]

    base_targets = [(f"{base_gw.url}/v1", base_gw.headers, "/responses", gw_body)] if base_gw else []

    warm = argparse.Namespace(**{**vars(args), "hold": 1.0})
    asyncio.run(run_level(20, gw_targets, warm, None, {}))
    wait_idle(gw.proc.pid)
    if base_gw is not None:
        asyncio.run(run_level(20, base_targets, warm, None, {}))
        wait_idle(base_gw.proc.pid)
    rss_idle = c.rss_bytes(gw.proc.pid)
    c.log(f"gateway idle RSS after warm-up: {rss_idle / 2**20:.1f} MiB; open-file limit {nofile}")

    rows: list[dict] = []
    fails = 0
    for n in levels:
        row: dict = {"streams": n}
        phases = [("gateway", gw_targets, gw.proc.pid)]
        if base_gw is not None:  # the gateway measured is always under the name "gateway" in the CPU figures
            phases.append(("baseline", base_targets, base_gw.proc.pid))
        if n in direct_levels:
            phases.append(("direct", up_targets, None))
        for name, targets, rss_pid in phases:
            c.log(f"{n} streams -> {name}")
            measured = base_gw.proc.pid if name == "baseline" and base_gw else gw.proc.pid
            r = asyncio.run(
                run_level(
                    n,
                    targets,
                    args,
                    rss_pid,
                    {"gateway": measured} | others,
                    measured if name != "direct" and n == args.py_spy_level else None,
                )
            )
            r["drain_s"] = round(wait_idle(measured), 1)
            if name == "gateway":
                r["rss_per_stream_kb_vs_idle"] = round(
                    (r["rss_window_mb"] * 2**20 - rss_idle) / max(r["with_first_token"], 1) / 1024, 1
                )
            row[name] = r
            w, a = r["added_inter_event_ms_window"], r["added_inter_event_ms_all"]
            cpu = r["cpu_cores_ramp_and_window"]
            c.log(
                f"  {name}: all open {r['all_open']} ({r['with_first_token']}/{n} in {r['ramp_s']} s, "
                f"{r['open_rate_per_s']}/s), added inter-event window p50 {w.get('median')} p99 {w.get('p99')} "
                f"max {w.get('max')} ms; incl. ramp p99 {a.get('p99')} ms; TTFE p50 {r['ttfe_ms'].get('median')} ms; "
                f"gateway {cpu.get('gateway_cores')} cores, machine {cpu.get('machine_cores')}, "
                f"others {cpu.get('others_cores')}; {r['cpu_us_per_relayed_event']} us CPU per relayed event, "
                f"{r['cpu_ms_per_opened_stream']} ms per opened stream"
                + (f"; RSS +{r['rss_per_stream_kb']} KiB/stream" if name != "direct" else "")
            )
        g = row["gateway"]
        p99 = g["added_inter_event_ms_window"].get("p99", float("inf"))
        row["within_bound"] = bool(g["all_open"] and p99 < args.bound_ms)
        rows.append(row)
        fails = 0 if row["within_bound"] else fails + 1
        if fails >= args.stop_after_fail and n != levels[-1]:
            c.log(f"stopping: {fails} consecutive level(s) over the {args.bound_ms:.0f} ms bound")
            break

    held = max([r["streams"] for r in rows if r["within_bound"]], default=0)
    print()
    print(
        f"{'streams':>7}  {'all open':>8}  {'open/s':>6}  {'p50 add':>7}  {'p99 add':>7}  {'max add':>7}  "
        f"{'p99 incl ramp':>13}  {'direct p99':>10}  {'KiB/stream':>10}  {'gw cores':>8}  {'us/event':>8}  "
        f"{'ms/open':>7}  within {args.bound_ms:.0f} ms"
    )
    for r in rows:
        g = r["gateway"]
        w = g["added_inter_event_ms_window"]
        dp99 = r["direct"]["added_inter_event_ms_window"].get("p99", float("nan")) if "direct" in r else float("nan")
        print(
            f"{r['streams']:>7}  {g['all_open']!s:>8}  {g['open_rate_per_s']!s:>6}  {w.get('median', float('nan')):>7.1f}  "
            f"{w.get('p99', float('nan')):>7.1f}  {w.get('max', float('nan')):>7.1f}  "
            f"{g['added_inter_event_ms_all'].get('p99', float('nan')):>13.1f}  {dp99:>10.1f}  "
            f"{g['rss_per_stream_kb']!s:>10}  {g['cpu_cores_ramp_and_window'].get('gateway_cores', 0):>8}  "
            f"{g['cpu_us_per_relayed_event']!s:>8}  {g['cpu_ms_per_opened_stream']!s:>7}  {r['within_bound']}"
        )
    if base_gw is not None:
        for r in rows:
            if "baseline" in r:
                b, g = r["baseline"], r["gateway"]
                print(
                    f"{r['streams']:>7}  baseline {args.baseline}: opened {b['with_first_token']} "
                    f"({b['open_rate_per_s']}/s), p99 {b['added_inter_event_ms_window'].get('p99')} ms, "
                    f"{b['cpu_cores_ramp_and_window'].get('gateway_cores')} cores, "
                    f"{b['cpu_us_per_relayed_event']} us/event, {b['cpu_ms_per_opened_stream']} ms/open; this tree: "
                    f"opened {g['with_first_token']} ({g['open_rate_per_s']}/s), p99 "
                    f"{g['added_inter_event_ms_window'].get('p99')} ms, "
                    f"{g['cpu_cores_ramp_and_window'].get('gateway_cores')} cores, "
                    f"{g['cpu_us_per_relayed_event']} us/event, {g['cpu_ms_per_opened_stream']} ms/open"
                )
    print(
        f"streams held by one gateway process with p99 added inter-event delay < {args.bound_ms:.0f} ms: {held} "
        f"(target >= 1000: {'met' if held >= 1000 else 'MISSED'})"
    )
    print()
    c.write_result(
        args.out,
        {
            "args": vars(args),
            "generator_loop": loop_kind,
            "nofile": nofile,
            "headline": {
                "max_streams_within_bound": held,
                "bound_ms": args.bound_ms,
                "rss_idle_mb": round(rss_idle / 2**20, 1),
            },
            "targets": {"at_least_1000_streams_within_bound": held >= 1000},
            "levels": rows,
            "notes": [
                (
                    f"all processes share {c.machine_info()['nproc']} cores: gateway, {len(ups)} upstreams, "
                    "postgres and the load generator ('others_cores' = CPU used by processes outside the "
                    "benchmark)"
                ),
                (
                    f"GATEWAY_UPSTREAM_MAX_CONNECTIONS={max_conn} for both trees (the default was 1000 before "
                    "2026-11-26 afternoon, 4000 since: one connection per simultaneous upstream stream)"
                ),
            ],
            "runtime_s": round(time.perf_counter() - t_begin, 1),
        },
    )
    plot(rows, args, args.out)
    gw.stop()
    if base_gw is not None:
        base_gw.stop()
    for u in ups:
        u.stop()
    pg.stop()


def plot(rows: list[dict], args: argparse.Namespace, name: str) -> None:
    plt = c.pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ns = [r["streams"] for r in rows]
    ax = axes[0]
    ax.plot(
        ns, [r["gateway"]["added_inter_event_ms_window"].get("p99") for r in rows], "o-", label="gateway p99 (window)"
    )
    ax.plot(
        ns,
        [r["gateway"]["added_inter_event_ms_window"].get("median") for r in rows],
        "s--",
        label="gateway p50 (window)",
    )
    ax.plot(
        ns, [r["gateway"]["added_inter_event_ms_all"].get("p99") for r in rows], "^:", label="gateway p99 (incl. ramp)"
    )
    dn = [r["streams"] for r in rows if "direct" in r]
    if dn:
        ax.plot(
            dn,
            [r["direct"]["added_inter_event_ms_window"].get("p99") for r in rows if "direct" in r],
            "kx",
            markersize=10,
            label="direct upstream p99 (window)",
        )
    ax.axhline(args.bound_ms, color="red", linestyle=":", label=f"{args.bound_ms:.0f} ms bound")
    ax.set_xlabel("simultaneous streams")
    ax.set_ylabel("added inter-event delay (ms)")
    ax.set_yscale("symlog")
    ax.set_title("added delay between tokens (100 ms nominal)")
    ax.legend(fontsize=7)
    ax = axes[1]
    ax.plot(ns, [r["gateway"]["rss_per_stream_kb"] for r in rows], "o-", label="vs RSS before the level")
    ax.plot(ns, [r["gateway"]["rss_per_stream_kb_vs_idle"] for r in rows], "s--", label="vs idle RSS")
    ax.set_xlabel("simultaneous streams")
    ax.set_ylabel("KiB per open stream")
    ax.set_title("gateway memory per open stream")
    ax.legend(fontsize=8)
    c.save_plot(fig, name)


if __name__ == "__main__":
    main()
