"""How many background runs one worker process holds (issue 55, item 1). Not a test.

A deployment as an operator runs it (tests/reliability/deployment.py: its own PostgreSQL and
Redis, one uvicorn web process, and here ONE Celery worker process, Celery's threads pool with
GATEWAY_WORKER_CONCURRENCY = N), against a slow scripted upstream in its own process
(bench/upstream_server.py: model `slow-T` streams T chunks, one every --interval seconds).

Phases, each printed:

1. capacity: N (default 500) background runs of T x interval (60 s) at once: how many
   completed, how many within 10% of the expected time (from create to completed, the
   database's timestamps), the worker's RSS per run (peak minus the idle worker after one
   warm-up run, over N), the worker's CPU seconds (and per run);
2. kill -9 of the worker holding --crash-runs (200) runs: how the runs ended (status and error
   code) and how long after the kill the last one did (the web process's reaper, at the
   default GATEWAY_HEARTBEAT_SECONDS 5 and GATEWAY_REAPER_INTERVAL_SECONDS 30);
3. SIGTERM of a worker holding --crash-runs runs, with GATEWAY_WORKER_DRAIN_SECONDS --drain:
   how they ended, when the process exited, and whether it claimed any of the runs created
   after the signal (it must not).

    .venv/bin/python bench/background_capacity.py [--runs 500] [--tokens 60] [--interval 1]

The machine's other load shows in the figures (say so when quoting them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Upstream, cpu_seconds, log, rss_bytes
from tests.reliability.deployment import Deployment


def start_worker(dep: Deployment, runs: int, name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    saved = dict(dep.env)
    dep.env.update({"GATEWAY_WORKER_CONCURRENCY": str(runs), **(env or {})})
    try:
        proc = dep._spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "project",
                "worker",
                "--loglevel=WARNING",
                "--without-gossip",
                "--without-mingle",
                "-n",
                f"{name}@%h",
            ],
            f"{name}.log",
        )
    finally:
        dep.env.clear()
        dep.env.update(saved)
    time.sleep(3)
    if proc.poll() is not None:
        raise RuntimeError(dep.log(f"{name}.log"))
    return proc


async def create(dep: Deployment, n: int, model: str, ramp: float = 0.0) -> list[str]:
    import httpx

    # A connection per create: no keep-alive connection closed by the server as it is reused.
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=dep.url, headers={"Authorization": f"Bearer {dep.key}"}, timeout=60, limits=limits
    ) as client:
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> str:
            await asyncio.sleep(ramp * i / n)  # spread over `ramp` seconds, as arrivals are
            async with sem:
                r = await client.post("/v1/responses", json={"model": model, "input": f"run {i}", "background": True})
                r.raise_for_status()
                return str(r.json()["id"])

        return list(await asyncio.gather(*(one(i) for i in range(n))))


def counts(dep: Deployment, ids: list[str]) -> dict[str, int]:
    rows = dep.rows("SELECT status, coalesce(error->>'code', '') FROM responses_api_response WHERE id = ANY(%s)", ids)
    out: dict[str, int] = {}
    for status, code in rows:
        key = f"{status}/{code}" if code else status
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def wait(dep: Deployment, ids: list[str], done: set[str], timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        n = dep.rows(
            "SELECT count(*) FROM responses_api_response WHERE id = ANY(%s) AND status = ANY(%s)", ids, list(done)
        )
        if n[0][0] == len(ids):
            break
        time.sleep(0.5)
    return time.monotonic() - started


def capacity(dep: Deployment, args: argparse.Namespace, model: str, expected: float) -> dict[str, Any]:
    worker = start_worker(dep, args.runs, "capacity")
    (warm,) = asyncio.run(create(dep, 1, "slow-2"))  # imports, pools and clients made: the idle baseline
    wait(dep, [warm], {"completed", "failed"}, 60)
    time.sleep(2)
    idle_rss = rss_bytes(worker.pid)
    cpu0 = cpu_seconds(worker.pid)
    log(f"capacity: worker pid {worker.pid} idle RSS {idle_rss / 2**20:.1f} MiB; creating {args.runs} runs")
    ids = asyncio.run(create(dep, args.runs, model, args.ramp))
    peak = idle_rss
    started = time.monotonic()
    while time.monotonic() - started < expected * 3 + 60:
        peak = max(peak, rss_bytes(worker.pid))
        running = dep.rows(
            "SELECT count(*) FROM responses_api_response WHERE id = ANY(%s) AND status IN ('queued', 'in_progress')",
            ids,
        )[0][0]
        if running == 0:
            break
        time.sleep(1)
    cpu = cpu_seconds(worker.pid) - cpu0
    rows = dep.rows(
        "SELECT status, extract(epoch FROM completed_at - created_at) FROM responses_api_response WHERE id = ANY(%s)",
        ids,
    )
    took = sorted(float(t) for s, t in rows if s == "completed" and t is not None)
    by_creation = [
        float(t)
        for (t,) in dep.rows(
            "SELECT extract(epoch FROM completed_at - created_at) FROM responses_api_response"
            " WHERE id = ANY(%s) AND status = 'completed' ORDER BY created_at",
            ids,
        )
    ]
    tenth = max(1, len(by_creation) // 10)
    spread = dep.rows(
        "SELECT extract(epoch FROM max(created_at) - min(created_at)) FROM responses_api_response WHERE id = ANY(%s)",
        ids,
    )[0][0]
    within = sum(1 for t in took if t <= expected * 1.1)
    os.kill(worker.pid, signal.SIGTERM)
    worker.wait(60)
    dep.processes.remove(worker)
    return {
        "runs": args.runs,
        "expected_s": expected,
        "ended": counts(dep, ids),
        "completed_within_10pct": within,
        "duration_s_min_median_max": [round(took[0], 1), round(took[len(took) // 2], 1), round(took[-1], 1)]
        if took
        else None,
        "created_over_s": round(float(spread), 1),  # the creates themselves: one web process, 32 at a time
        # mean duration of the first and the last tenth created: a later start shows as a longer one
        "mean_s_first_last_tenth_created": [
            round(sum(by_creation[:tenth]) / tenth, 1),
            round(sum(by_creation[-tenth:]) / tenth, 1),
        ]
        if by_creation
        else None,
        "rss_idle_mib": round(idle_rss / 2**20, 1),
        "rss_peak_mib": round(peak / 2**20, 1),
        "rss_per_run_kib": round((peak - idle_rss) / 1024 / args.runs, 1),
        "worker_cpu_s": round(cpu, 1),
        "worker_cpu_ms_per_run": round(cpu * 1000 / args.runs, 1),
        "worker_cores": round(cpu / (time.monotonic() - started), 3),
    }


def hold(dep: Deployment, n: int, model: str) -> list[str]:
    ids = asyncio.run(create(dep, n, model))
    wait(dep, ids, {"in_progress"}, 120)
    time.sleep(2)  # every run streaming
    return ids


def crash(dep: Deployment, args: argparse.Namespace, model: str) -> dict[str, Any]:
    worker = start_worker(dep, args.crash_runs, "doomed")
    ids = hold(dep, args.crash_runs, model)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(10)
    dep.processes.remove(worker)
    took = wait(dep, ids, {"completed", "failed", "cancelled", "incomplete"}, 180)
    return {"runs": args.crash_runs, "ended": counts(dep, ids), "last_ended_after_kill_s": round(took, 1)}


def drain(dep: Deployment, args: argparse.Namespace, model: str) -> dict[str, Any]:
    worker = start_worker(dep, args.crash_runs, "draining", {"GATEWAY_WORKER_DRAIN_SECONDS": str(args.drain)})
    ids = hold(dep, args.crash_runs, model)
    os.kill(worker.pid, signal.SIGTERM)
    signalled = time.monotonic()
    later = asyncio.run(create(dep, 20, model))
    worker.wait(args.drain + 120)
    exited = time.monotonic() - signalled
    dep.processes.remove(worker)
    return {
        "runs": args.crash_runs,
        "drain_s": args.drain,
        "ended": counts(dep, ids),
        "exited_after_s": round(exited, 1),
        "created_after_sigterm": counts(dep, later),
    }


def direct_seconds(base_url: str, model: str) -> float:
    """The expected time of a run: the upstream's own stream, asked directly."""
    import httpx

    started = time.monotonic()
    body = {"model": model, "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=600) as r:
        for _ in r.iter_lines():
            pass
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--tokens", type=int, default=60, help="chunks per answer")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between chunks")
    parser.add_argument("--ramp", type=float, default=0.0, help="capacity: spread the creates over this many seconds")
    parser.add_argument("--crash-runs", type=int, default=200)
    parser.add_argument("--drain", type=float, default=20.0)
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["capacity", "kill", "drain"])
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-bgcap-"))
    upstream = Upstream(log_dir=base, slow_interval=args.interval, slow_tokens=args.tokens)
    model = f"slow-{args.tokens}"
    expected = direct_seconds(upstream.base_url, model)
    log(f"the upstream alone streams {model} in {expected:.1f} s")
    env = {
        "GATEWAY_HEARTBEAT_SECONDS": "5",
        "GATEWAY_REAPER_INTERVAL_SECONDS": "30",
        "DB_POOL_MAX_SIZE": "10",
        "GATEWAY_CACHE_SECONDS": "5",
    }
    config = {
        "providers": [{"name": "scripted", "base_url": upstream.base_url}],
        "models": [{"name": m, "targets": [{"provider": "scripted", "model": m}]} for m in (model, "slow-2")],
    }
    dep = Deployment(base, upstream.base_url, model=model, env=env, config=config)
    try:
        dep.start_web(workers=1)
        phases: dict[str, Callable[[], dict[str, Any]]] = {
            "capacity": lambda: capacity(dep, args, model, expected),
            "kill": lambda: crash(dep, args, model),
            "drain": lambda: drain(dep, args, model),
        }
        for name, phase in phases.items():
            if name not in args.skip:
                print(f"{name}: {phase()}", flush=True)
    except BaseException:
        log(f"logs kept in {base}")
        dep.stop()
        upstream.stop()
        raise
    dep.stop()
    upstream.stop()
    if args.keep:
        log(f"logs kept in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
