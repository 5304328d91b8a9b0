"""Upstream HTTP clients compared: client CPU per non-streaming chat completion call.

Not a gateway benchmark: it decides which client the gateway uses for model calls
(responses_api/upstreams/http.py). One keep-alive connection per client, the
scripted upstream with no latency, `--calls` sequential POST /v1/chat/completions
per client after a warm-up; prints process CPU and wall time per call.

    /tmp/venv/bin/python bench/http_clients.py            # httpx, aiohttp, and the benchmark's raw client
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c

BODY = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "hello there"}]}).encode()
HEADERS = {"content-type": "application/json", "authorization": "Bearer x"}


async def with_httpx(base: str, calls: int) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=base) as client:
        for _ in range(calls):
            json.loads((await client.post("/chat/completions", content=BODY, headers=HEADERS)).content)


async def with_aiohttp(base: str, calls: int) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        for _ in range(calls):
            async with session.post(f"{base}/chat/completions", data=BODY, headers=HEADERS) as r:
                json.loads(await r.read())


async def with_raw(base: str, calls: int) -> None:
    client = c.RawHttp(base.removesuffix("/v1"), HEADERS)
    for _ in range(calls):
        json.loads((await client.request("POST", "/v1/chat/completions", BODY, keep_body=True)).body)
    client.close()


CLIENTS = {"httpx": with_httpx, "aiohttp": with_aiohttp, "raw": with_raw}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--clients", default="httpx,aiohttp,raw")
    args = ap.parse_args()
    c.use_uvloop()
    d = c.run_dir("clients")
    up = c.Upstream(latency=0.0, log_dir=d)
    results = {}
    try:
        for name in args.clients.split(","):
            run = CLIENTS[name]
            asyncio.run(run(up.base_url, 50))  # warm-up
            cpu, wall = time.process_time(), time.perf_counter()
            asyncio.run(run(up.base_url, args.calls))
            results[name] = {
                "client_cpu_us_per_call": round((time.process_time() - cpu) / args.calls * 1e6, 1),
                "wall_us_per_call": round((time.perf_counter() - wall) / args.calls * 1e6, 1),
            }
            c.log(
                f"{name}: {results[name]['client_cpu_us_per_call']} µs CPU per call, "
                f"{results[name]['wall_us_per_call']} µs wall (upstream included)"
            )
    finally:
        up.stop()
    c.write_result("http_clients", {"args": vars(args), "clients": results})


if __name__ == "__main__":
    main()
