"""Profile the gateway under load with py-spy: where does a request's CPU time go?

Starts Postgres, the scripted upstream and the gateway (as overhead.py does),
drives non-streaming (or streaming, --stream) creates at --concurrency for
--seconds, and records the gateway process with py-spy (on-CPU samples only:
--gil, so threads waiting on I/O or locks don't count). Prints and writes
bench/results/profile-<label>.txt with the top functions by self and
inclusive share, plus a speedscope JSON you can open at speedscope.app.

--settings MODULE runs the gateway with another DJANGO_SETTINGS_MODULE (for
diagnostics only, e.g. bench/diag_settings_async_mw.py: the project settings
without the sync-only WhiteNoise middleware), so that the effect of a fix can
be measured before it is made.

--background drives what the web side of a background response does instead (issue 55): a
create with `background: true`, then (once its run should be over: --bg-wait s) one retrieve,
again if it was not over yet; a Redis and a Celery worker run beside the gateway (the worker is
not recorded). CPU per request is then per background response (its create and retrieves).

    /tmp/venv/bin/python bench/profile_gateway.py --concurrency 16 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c


def py_spy() -> str | None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return exe if Path(exe).exists() else None


async def drive(url: str, headers: dict[str, str], body: bytes, stream: bool, conc: int, seconds: float) -> dict:
    done = 0
    errors = 0
    lat: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done, errors
        cl = c.RawHttp(url, headers)
        for _ in range(1_000_000):  # bounded; ends at the deadline
            if time.perf_counter() >= deadline:
                break
            res = await cl.request("POST", "/responses", body, sse=stream, timeout=60)
            if res.ok:
                done += 1
                lat.append(res.total)
            else:
                errors += 1
        cl.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    wall = time.perf_counter() - t0
    return {"requests": done, "errors": errors, "rps": round(done / wall, 1), "latency_ms": c.summary(lat, 1000)}


async def drive_background(
    url: str, headers: dict[str, str], body: bytes, conc: int, seconds: float, wait: float
) -> dict:
    """Background creates, each followed by one retrieve once its run should be over (again,
    counted, while it is not): what the web side of a background response does."""
    done = 0
    errors = 0
    extra = 0
    lat: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done, errors, extra
        cl = c.RawHttp(url, headers)
        for _ in range(1_000_000):  # bounded; ends at the deadline
            if time.perf_counter() >= deadline:
                break
            res = await cl.request("POST", "/responses", body, keep_body=True, timeout=60)
            if not res.ok or res.body is None:
                errors += 1
                continue
            lat.append(res.total)
            rid = json.loads(res.body)["id"]
            await asyncio.sleep(wait)
            for _ in range(200):
                got = await cl.request("GET", f"/responses/{rid}", keep_body=True, timeout=60)
                status = json.loads(got.body or b"{}").get("status")
                if status not in ("queued", "in_progress"):
                    done += status == "completed"
                    errors += status != "completed"
                    break
                extra += 1
                await asyncio.sleep(wait / 4)
        cl.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    wall = time.perf_counter() - t0
    return {
        "requests": done,
        "errors": errors,
        "extra_retrieves": extra,
        "rps": round(done / wall, 1),
        "create_latency_ms": c.summary(lat, 1000),
    }


# Where a sample's CPU goes: the first of these found walking the stack from the leaf up.
CATEGORIES = [
    ("json encode/decode", ("json/", "orjson")),
    ("Celery/kombu (send_task, publish)", ("celery/", "kombu/", "amqp/", "vine/")),
    ("redis client", ("redis/",)),
    ("ORM + psycopg (SQL build, execute, rows)", ("django/db/", "psycopg")),
    (
        "upstream HTTP client (aiohttp; httpx, httpcore, h11, anyio for tools)",
        ("aiohttp/", "yarl/", "multidict/", "httpx/", "httpcore/", "h11/", "anyio/"),
    ),
    ("asgiref sync/async hops, thread pools, locks", ("asgiref/", "concurrent/futures", "threading.py", "queue.py")),
    ("Django request handling and middleware", ("django/",)),
    ("uvicorn HTTP protocol", ("uvicorn/protocols",)),
    ("gateway code (responses_api, tool_registry)", ("responses_api/", "tool_registry/")),
    ("asyncio event loop", ("asyncio/",)),
]


# What each gateway feature costs (issue 40: a feature not configured should cost nothing
# measurable): the share of samples with one of its frames anywhere on the stack.
FEATURES = [
    ("request parsing (protocol/request.py)", ("protocol/request.py",)),
    ("API key authentication", ("api/auth.py", "BearerKeyAuthentication")),
    ("rate limits and budgets (admission)", ("orchestration/admission.py", "store/limit_counters.py")),
    ("metrics", ("observability/metrics.py", "prometheus_client/")),
    ("access log", ("_access_line",)),
    ("usage records", ("store/usage.py",)),
    ("tracing hooks", ("engine/tracing.py", "opentelemetry/")),
    ("MCP planning", ("responses_api/mcp/",)),
    ("tool registry planning", ("orchestration/toolplan.py",)),
    ("automatic compaction", ("engine/autocompact.py",)),
    ("tool search", ("engine/tool_search.py",)),
    ("reasoning sealing", ("sealing.py",)),
    ("surface classification", ("protocol/surface.py",)),
    ("router choice (attempt order, cooldowns)", ("attempt_order",)),
    ("DRF dispatch", ("rest_framework/",)),
    ("stored response write", ("store/persistence.py",)),
    ("upstream call (body, aiohttp, decode)", ("responses_api/upstreams/",)),
    ("background hand-off (handoff.start_on_worker)", ("orchestration/handoff.py",)),
    ("... Celery send_task", ("send_task",)),
    ("... opening events (event log append)", ("append_many", "append_batch")),
    ("... row insert (response_create)", ("response_create",)),
    ("retrieve (ResponseDetailView.get)", ("ResponseDetailView",)),
    ("... stored response read (response_retrieve)", ("response_retrieve",)),
    ("... running view (Redis GET)", ("running_view",)),
    ("thread hops (asyncio.to_thread, sync_to_async)", ("to_thread", "sync_to_async", "SyncToAsync")),
]


def features(frames: list[str]) -> list[str]:
    return [name for name, needles in FEATURES if any(n in f for f in frames for n in needles)]


def categorize(frames: list[str]) -> str:
    for frame in reversed(frames):
        where = frame[frame.rfind("(") + 1 :] if "(" in frame else frame
        for name, needles in CATEGORIES:
            if any(n in where for n in needles):
                return name
    return "other"


def aggregate(raw: Path, top: int) -> tuple[str, dict]:
    cats: collections.Counter = collections.Counter()
    self_c: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    feats: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        k = int(n)
        total += k
        frames = stack.split(";")
        cats[categorize(frames)] += k
        for name in features(frames):
            feats[name] += k
        self_c[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    lines = [f"on-CPU samples: {total}", "", "by category (leaf-most library on the stack):"]
    lines += [f"  {n / total * 100:5.1f}%  {name}" for name, n in cats.most_common()]
    lines += ["", "by feature (inclusive; a sample may count for several):"]
    lines += [f"  {feats[name] / total * 100:5.1f}%  {name}" for name, _ in FEATURES]
    lines += ["", "top self (leaf) functions:"]
    lines += [f"  {n / total * 100:5.1f}%  {f}" for f, n in self_c.most_common(top)]
    lines += ["", "top inclusive functions:"]
    lines += [f"  {n / total * 100:5.1f}%  {f}" for f, n in incl.most_common(top * 3)]
    data = {
        "samples": total,
        "categories": {k: round(v / total * 100, 2) for k, v in cats.most_common()},
        "features": {name: round(feats[name] / total * 100, 2) for name, _ in FEATURES},
        "self": [[f, round(n / total * 100, 2)] for f, n in self_c.most_common(top)],
        "inclusive": [[f, round(n / total * 100, 2)] for f, n in incl.most_common(top * 3)],
    }
    return "\n".join(lines), data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--settings", default="", help="DJANGO_SETTINGS_MODULE for the gateway (diagnostics)")
    ap.add_argument("--label", default="")
    ap.add_argument("--server", choices=("uvicorn", "granian"), default="uvicorn", help="the ASGI server to run")
    ap.add_argument("--tree", default="", metavar="REV", help="profile the gateway of git commit REV instead")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-profile", action="store_true", help="only measure (no py-spy)")
    ap.add_argument("--no-store", action="store_true", help="store: false (what the database write costs)")
    ap.add_argument("--background", action="store_true", help="background creates + one final retrieve each")
    ap.add_argument("--bg-wait", type=float, default=0.5, help="seconds from a background create to its retrieve")
    args = ap.parse_args()
    c.raise_nofile()
    c.use_uvloop()
    label = args.label or f"c{args.concurrency}{'-stream' if args.stream else ''}{'-bg' if args.background else ''}"
    spy = None if args.no_profile else py_spy()
    if not args.no_profile and spy is None:
        c.log("py-spy not found (pip install py-spy into the venv); measuring only")

    d = c.run_dir("profile")
    pg = c.start_postgres(d)
    up = c.Upstream(latency=args.latency, log_dir=d)
    extra = {"DJANGO_SETTINGS_MODULE": args.settings, "PYTHONPATH": str(c.BENCH)} if args.settings else {}
    rds = None
    if args.background:  # a broker and event log, as compose runs them (the worker is started below)
        from tests.support.servers import start_redis

        rds = start_redis(d)
        extra["REDIS_URL"] = rds.url
    tree = c.source_tree(args.tree, d / "tree") if args.tree else None
    gw = c.Gateway(
        db_url=pg.url,
        providers={"local": up.base_url},
        models={"bench-model": ("local", "echo")},
        log_dir=d,
        extra_env=extra,
        server=args.server,
        tree=tree,
    )
    worker = None
    if args.background:
        cmd = [c.PYTHON, "-m", "celery", "-A", "project", "worker", "--loglevel=WARNING"]
        cmd += ["--without-gossip", "--without-mingle", "-n", "profile@%h"]
        worker = c.Proc("worker", cmd, env=gw.env, log_dir=d, cwd=tree)
        time.sleep(3)
    body = json.dumps(
        {
            "model": "bench-model",
            "input": "Say hello to the benchmark.",
            "stream": args.stream,
            **({"store": False} if args.no_store else {}),
            **({"background": True} if args.background else {}),
        }
    ).encode()
    url = f"{gw.url}/v1"

    def load(conc: int, seconds: float) -> dict:
        if args.background:
            return asyncio.run(drive_background(url, gw.headers, body, conc, seconds, args.bg_wait))
        return asyncio.run(drive(url, gw.headers, body, args.stream, conc, seconds))

    load(min(args.concurrency, 8), 3.0)  # warm-up

    raw = d / "gateway.raw"
    proc = None
    if spy:
        proc = subprocess.Popen(
            [
                spy,
                "record",
                "-p",
                str(gw.proc.pid),
                "--gil",
                "-r",
                str(args.rate),
                "-d",
                str(int(args.seconds)),
                "-f",
                "raw",
                "-o",
                str(raw),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
    meter = c.CpuMeter({"gateway": gw.proc.pid, "upstream": up.proc.pid, "postgres": pg.pid}).start()
    stats = load(args.concurrency, args.seconds)
    stats["cpu_cores"] = meter.stop()
    stats["gateway_cpu_ms_per_request"] = round(
        stats["cpu_cores"]["gateway_cores"] * stats["cpu_cores"]["wall_s"] / max(stats["requests"], 1) * 1000, 3
    )
    c.log(
        f"{label}: {stats['rps']} req/s, p50 {(stats.get('latency_ms') or stats.get('create_latency_ms') or {}).get('median')} ms, "
        f"gateway {stats['cpu_cores']['gateway_cores']} cores = {stats['gateway_cpu_ms_per_request']} ms CPU/request"
    )
    result: dict = {"args": vars(args), "load": stats}
    if proc is not None:
        try:
            proc.wait(timeout=args.seconds + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
        if raw.exists():
            text, data = aggregate(raw, args.top)
            print(text)
            c.RESULTS.mkdir(parents=True, exist_ok=True)
            (c.RESULTS / f"profile-{label}.txt").write_text(f"{label}: {json.dumps(stats)}\n\n{text}\n")
            shutil.copy(raw, c.RESULTS / f"profile-{label}.folded")
            result["profile"] = data
    c.write_result(f"profile-{label}", result)
    if worker is not None:
        worker.stop()
    gw.stop()
    if rds is not None:
        rds.stop()
    up.stop()
    pg.stop()


if __name__ == "__main__":
    main()
