"""Anthropic Messages front door: this gateway's `/v1/messages` against LiteLLM's, same upstream, same run.

Issue 57 asks that the front door's own CPU per request be at most 1/10 of LiteLLM's
`/v1/messages` on the same upstream in the same run. One scripted Chat Completions upstream
(`bench/upstream_server.py`, fixed latency), and in front of it:

* `gateway`: this gateway's `POST /v1/messages`, as Claude Code calls it (`x-api-key`,
  `anthropic-version`), stored as the store rule says (the default: a response per turn in
  PostgreSQL);
* `gateway_nostore`: the same process with `x-gateway-store: false` (a usage record only): like
  with like against LiteLLM, which stores nothing;
* `litellm`: LiteLLM's proxy (pinned, `common.LITELLM_VERSION`) `POST /v1/messages`, its model
  `openai/echo` on the same upstream (LiteLLM translates Messages to Chat Completions for an
  openai-compatible model);
* `responses`: this gateway's `POST /v1/responses` (stored) on the same route: the reference the
  front door is weighed against.

Every request is an Anthropic body (`model`, `max_tokens`, one user message made unique per
request, so each stored turn starts a conversation of its own); each load worker alternates
non-streaming and streaming requests. Per target and round: `--concurrency` workers (default 16),
one keep-alive connection each, for `--duration` seconds (at most `--cap` requests); `--rounds`
rounds, the target order reversed each round. A streamed request counts only when its stream ends
(`message_stop`, or `response.completed` for the reference). The CPU of each server's process tree
(/proc, as common.py measures it), PostgreSQL's, the upstream's and this process's is read around
every cell; per target: requests, req/s, latency, the target process's CPU milliseconds per request,
PostgreSQL's beside the stored targets, and the ratios to LiteLLM.

    .venv/bin/python bench/messages.py [--duration 5] [--rounds 3] [--concurrency 16] [--label NAME]

Writes bench/results/messages-<label>.json and .txt (label: the git head unless given).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c
from overhead import _litellm_version

PROMPT = "Say hello to the benchmark."
ANTHROPIC_VERSION = "2023-06-01"
# What each kind of stream ends with: a stream without it is counted as an error.
LITELLM_MODELS = {"bench-messages": "openai/echo"}
LITELLM_SETTINGS = {"use_chat_completions_url_for_anthropic_messages": True}
END = {"/messages": b"message_stop", "/responses": b"response.completed"}


class Target:
    def __init__(self, name: str, base: str, headers: dict[str, str], path: str, model: str, pid: int) -> None:
        self.name, self.base, self.headers, self.path, self.model, self.pid = name, base, headers, path, model, pid
        self.end = END[path]
        self.n = 0

    def body(self, stream: bool) -> bytes:
        """A fresh body: the user message carries a counter (each stored turn a new conversation)."""
        self.n += 1
        text = f"{PROMPT} #{self.n}"
        if self.path == "/messages":
            req: dict = {"model": self.model, "max_tokens": 256, "messages": [{"role": "user", "content": text}]}
        else:
            req = {"model": self.model, "input": text}
        if stream:
            req["stream"] = True
        return json.dumps(req).encode()

    def client(self) -> c.RawHttp:
        return c.RawHttp(self.base, self.headers)

    async def request(self, cl: c.RawHttp, stream: bool, *, keep_body: bool = False) -> tuple[c.Result, bool]:
        """One request; (result, whether it succeeded: 2xx and, streamed, its stream ended)."""
        res = await cl.request(
            "POST",
            self.path,
            self.body(stream),
            sse=stream,
            keep_body=keep_body,
            event_times=stream,
            match=self.end if stream else None,
            timeout=30,
        )
        ok = res.ok and (not stream or bool(res.event_times))
        return res, ok


async def warm_up(t: Target, n: int) -> dict:
    """`n` requests of each kind, checked: a whole answer is the upstream's echo, a stream ends."""
    cl = t.client()
    sample: dict = {}
    try:
        for i in range(2 * n):
            stream = i % 2 == 1
            res, ok = await t.request(cl, stream, keep_body=True)
            body = (res.body or b"").decode(errors="replace")
            # A whole answer echoes the prompt; a stream echoes it in 4-character pieces.
            if not ok or (not stream and PROMPT not in body):
                raise RuntimeError(
                    f"{t.name}: {'streamed ' if stream else ''}request failed: {res.status} {res.error} {body[:600]!r}"
                )
            sample["stream" if stream else "json"] = body[:1500]
    finally:
        cl.close()
    return sample


async def load(t: Target, concurrency: int, duration: float, cap: int, pids: dict[str, int]) -> dict:
    """`concurrency` workers alternating non-streaming and streaming requests, until `duration`
    seconds or `cap` requests; CPU seconds of every process around it."""
    lat: dict[str, list[float]] = {"json": [], "stream": []}
    ttfe: list[float] = []
    errors = {"json": 0, "stream": 0}
    issued = 0
    deadline = time.perf_counter() + duration

    async def worker(w: int) -> None:
        nonlocal issued
        cl = t.client()
        k = w  # half the workers start with a stream
        try:
            while time.perf_counter() < deadline and issued < cap:
                issued += 1
                stream = k % 2 == 1
                k += 1
                res, ok = await t.request(cl, stream)
                kind = "stream" if stream else "json"
                if ok:
                    lat[kind].append(res.total)
                    if stream and res.ttfe is not None:
                        ttfe.append(res.ttfe)
                else:
                    errors[kind] += 1
        finally:
            cl.close()

    cpu0 = {n: c.tree_cpu_seconds(p) for n, p in pids.items()}
    gen0, m0 = c.self_cpu_seconds(), c.machine_busy_seconds()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    cpu = {n: c.tree_cpu_seconds(p) - cpu0[n] for n, p in pids.items()}
    cpu["generator"] = c.self_cpu_seconds() - gen0
    cpu["machine"] = c.machine_busy_seconds() - m0
    cpu["others"] = max(0.0, cpu["machine"] - sum(v for k, v in cpu.items() if k != "machine"))
    return {"lat": lat, "ttfe": ttfe, "errors": errors, "elapsed": elapsed, "cpu_s": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.02, help="upstream latency in seconds (default 0.02)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per target per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (target order reversed each round)")
    ap.add_argument("--cap", type=int, default=20000, help="max requests per target per round")
    ap.add_argument("--warmup", type=int, default=10, help="warm-up requests of each kind per target")
    ap.add_argument("--no-litellm", action="store_true")
    ap.add_argument("--label", default="", help="results name: messages-<label> (default: the git head)")
    args = ap.parse_args()
    c.raise_nofile()
    loop_kind = c.use_uvloop()
    t_begin = time.perf_counter()
    label = args.label or c.machine_info()["git_head"] or "run"

    d = c.run_dir("messages")
    pg = c.start_postgres(d)
    up = c.Upstream(latency=args.latency, log_dir=d)
    gw = c.Gateway(
        db_url=pg.url, providers={"local": up.base_url}, models={"bench-model": ("local", "echo")}, log_dir=d
    )
    anthropic = {"x-api-key": gw.key, "anthropic-version": ANTHROPIC_VERSION}
    targets = [
        Target("gateway", f"{gw.url}/v1", anthropic, "/messages", "bench-model", gw.proc.pid),
        Target(
            "gateway_nostore",
            f"{gw.url}/v1",
            anthropic | {"x-gateway-store": "false"},
            "/messages",
            "bench-model",
            gw.proc.pid,
        ),
        Target("responses", f"{gw.url}/v1", gw.headers, "/responses", "bench-model", gw.proc.pid),
    ]
    litellm_note = ""
    ll = None
    if not args.no_litellm:
        exe = c.ensure_litellm()
        if exe is None:
            litellm_note = "LiteLLM skipped: install failed"
        else:
            try:
                # `openai/echo`: an openai-compatible model at the upstream's /v1. LiteLLM 1.108.7's
                # /v1/messages sends an `openai/` model to the upstream's /v1/responses unless
                # `use_chat_completions_url_for_anthropic_messages` is set (litellm#37088); with it,
                # its Messages -> Chat Completions translation, as the gateway's on this route.
                ll = c.LiteLLM(
                    exe,
                    upstream_base=up.base_url,
                    log_dir=d,
                    extra_models=LITELLM_MODELS,
                    settings=LITELLM_SETTINGS,
                )
                targets.append(
                    Target(
                        "litellm",
                        f"{ll.url}/v1",
                        {"x-api-key": ll.MASTER_KEY, "anthropic-version": ANTHROPIC_VERSION},
                        "/messages",
                        "bench-messages",
                        ll.proc.pid,
                    )
                )
            except RuntimeError as exc:
                litellm_note = f"LiteLLM skipped: it did not start ({str(exc)[:300]})"
    else:
        litellm_note = "LiteLLM skipped (--no-litellm)"
    if litellm_note:
        c.log(litellm_note)
    names = [t.name for t in targets]

    samples = {}
    for t in targets:
        samples[t.name] = asyncio.run(warm_up(t, args.warmup))
    if ll is not None and '"id":"chatcmpl-' not in samples["litellm"]["json"].replace(" ", ""):
        # The id of a Chat Completions answer: LiteLLM took the route asked of it, not the
        # upstream's own /v1/responses or /v1/messages.
        raise RuntimeError(f"litellm: not answered through Chat Completions: {samples['litellm']['json'][:300]!r}")
    c.log("warm-up answers checked (the upstream's echo, streams ended): " + ", ".join(names))

    pids = {"target": 0, "postgres": pg.pid, "upstream": up.proc.pid}
    cells: dict[str, list[dict]] = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = targets if rnd % 2 == 0 else list(reversed(targets))
        for t in order:
            cell = asyncio.run(load(t, args.concurrency, args.duration, args.cap, pids | {"target": t.pid}))
            cells[t.name].append(cell)
            done = len(cell["lat"]["json"]) + len(cell["lat"]["stream"])
            c.log(
                f"round {rnd + 1} {t.name}: {done} requests in {cell['elapsed']:.1f} s, "
                f"errors {cell['errors']}, its CPU {cell['cpu_s']['target']:.2f} s"
            )
            time.sleep(0.3)

    results: dict = {}
    for n in names:
        lat = {k: [x for cell in cells[n] for x in cell["lat"][k]] for k in ("json", "stream")}
        requests = len(lat["json"]) + len(lat["stream"])
        elapsed = sum(cell["elapsed"] for cell in cells[n])
        cpu_s = {k: sum(cell["cpu_s"][k] for cell in cells[n]) for k in cells[n][0]["cpu_s"]}
        stored = n in ("gateway", "responses")
        results[n] = {
            "requests": requests,
            "requests_json": len(lat["json"]),
            "requests_stream": len(lat["stream"]),
            "errors": {k: sum(cell["errors"][k] for cell in cells[n]) for k in ("json", "stream")},
            "seconds": round(elapsed, 2),
            "rps": round(requests / elapsed, 1) if elapsed else 0.0,
            "latency_ms": {k: c.summary(v, 1000) for k, v in lat.items()},
            "ttfe_ms": c.summary([x for cell in cells[n] for x in cell["ttfe"]], 1000),
            "cpu_ms_per_request": {
                "process": round(cpu_s["target"] / requests * 1000, 3) if requests else None,
                "postgres": round(cpu_s["postgres"] / requests * 1000, 3) if requests and stored else None,
                "upstream": round(cpu_s["upstream"] / requests * 1000, 3) if requests else None,
                "generator": round(cpu_s["generator"] / requests * 1000, 3) if requests else None,
            },
            "cores": {k: round(v / elapsed, 3) for k, v in cpu_s.items()} if elapsed else {},
        }

    # What was stored: a response per stored request (the stored targets' and their warm-ups'),
    # none for gateway_nostore (it leaves a usage record).
    time.sleep(1.0)
    stored_rows = _count(pg.url, "SELECT count(*) FROM responses_api_response")
    stored_sent = sum(
        results[n]["requests"] + sum(results[n]["errors"].values()) + 2 * args.warmup for n in ("gateway", "responses")
    )

    ratios: dict[str, float | None] = {}
    targets_check: dict[str, bool] = {}

    def per_req(n: str) -> float | None:
        return results[n]["cpu_ms_per_request"]["process"] if n in results else None

    if "litellm" in results and per_req("litellm"):
        for n in ("gateway", "gateway_nostore", "responses"):
            ours = per_req(n)
            ratios[f"{n}_over_litellm"] = round(ours / per_req("litellm"), 3) if ours else None  # type: ignore[operator]
        for n in ("gateway", "gateway_nostore"):
            r = ratios[f"{n}_over_litellm"]
            targets_check[f"{n}_cpu_per_request_le_1/10_litellm"] = r is not None and r <= 0.1
    if per_req("responses"):
        for n in ("gateway", "gateway_nostore"):
            ours = per_req(n)
            ratios[f"{n}_over_responses"] = round(ours / per_req("responses"), 3) if ours else None  # type: ignore[operator]

    lines = [
        f"bench/messages.py  label {label}  git {c.machine_info()['git_head']}  "
        f"concurrency {args.concurrency}, {args.rounds} rounds x {args.duration:g} s per target, "
        f"upstream latency {args.latency * 1000:.0f} ms, non-streaming and streaming alternating",
        f"{'target':<16} {'requests':>8} {'req/s':>7} {'err':>5} {'p50 ms':>7} {'p50 stream':>10} "
        f"{'CPU ms/req':>10} {'+pg ms/req':>10} {'x LiteLLM':>9}",
    ]
    for n in names:
        r = results[n]
        ratio = ratios.get(f"{n}_over_litellm")
        pg_ms = r["cpu_ms_per_request"]["postgres"]
        lines.append(
            f"{n:<16} {r['requests']:>8} {r['rps']:>7} {sum(r['errors'].values()):>5} "
            f"{r['latency_ms']['json'].get('median', float('nan')):>7} "
            f"{r['latency_ms']['stream'].get('median', float('nan')):>10} "
            f"{r['cpu_ms_per_request']['process']:>10} {pg_ms if pg_ms is not None else '-':>10} "
            f"{ratio if ratio is not None else '-':>9}"
        )
    lines.append(
        "CPU ms/req: the target's server process tree; +pg: PostgreSQL's (stored targets); x LiteLLM: the "
        "target's CPU per request over LiteLLM's /v1/messages"
    )
    for k, v in ratios.items():
        lines.append(f"  ratio {k}: {v}")
    for k, ok in targets_check.items():
        lines.append(f"  target {k}: {'met' if ok else 'MISSED'}")
    mean_others = sum(results[n]["cores"].get("others", 0.0) for n in names) / len(names)
    lines.append(f"  other work on the machine meanwhile: {mean_others:.2f} cores on average (of {os.cpu_count()})")
    lines.append(f"  responses stored in PostgreSQL: {stored_rows} (the stored targets sent {stored_sent} requests)")
    if litellm_note:
        lines.append(f"  {litellm_note}")
    text = "\n".join(lines)
    print()
    print(text)
    print()

    data = {
        "args": vars(args),
        "label": label,
        "generator_loop": loop_kind,
        "litellm_note": litellm_note,
        "litellm_version": _litellm_version() if ll else None,
        "litellm_models": LITELLM_MODELS if ll else None,
        "litellm_settings": LITELLM_SETTINGS if ll else None,
        "results": results,
        "ratios": ratios,
        "targets": targets_check,
        "warmup_samples": samples,
        "stored_responses": {"rows": stored_rows, "stored_targets_sent": stored_sent},
        "notes": [
            "gateway: uvicorn (uvloop, httptools), DEBUG=0, Postgres (psycopg pool); target gateway stores each "
            "turn (the default store rule), gateway_nostore sends x-gateway-store: false (a usage record only)",
            "litellm: proxy with one uvicorn worker, master key, no database: it stores nothing",
            "responses: this gateway's /v1/responses (stored) on the same route, the reference",
            "each worker alternates non-streaming and streaming requests; all processes share the machine's cores",
        ],
        "runtime_s": round(time.perf_counter() - t_begin, 1),
    }
    path = c.write_result(f"messages-{label}", data)
    path.with_suffix(".txt").write_text(text + "\n")
    c.log(f"wrote {path.with_suffix('.txt').relative_to(c.REPO)}")
    for srv in (ll, gw, up):
        if srv is not None:
            srv.stop()
    pg.stop()


def _count(db_url: str, sql: str) -> int | None:
    import psycopg

    try:
        with psycopg.connect(db_url) as conn:
            row = conn.execute(sql).fetchone()
    except psycopg.Error as exc:
        c.log(f"could not count ({exc})")
        return None
    return int(row[0]) if row else None


if __name__ == "__main__":
    main()
