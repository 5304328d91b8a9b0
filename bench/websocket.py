"""WebSocket mode against HTTP: a tool loop's rounds, and continuing a long chain.

1. Tool loop: --rounds rounds (default 20) of a client tool loop (the model calls `step` every
   turn, the client answers with the function_call_output and previous_response_id), over one
   WebSocket and over HTTP (SSE, and plain JSON), --loops loops each, interleaved. The same
   Chat Completions requests (1 user message + k tool call/result pairs) are also sent to the
   upstream directly, so the gateway-added time per round is round time minus upstream time.
2. Chain: a --chain-turn chain (default 500) is built on one socket; then continuations on top
   of it and on top of a 1-turn chain, over the WebSocket (from the socket's memory) and over
   HTTP (previous_response_id, the chain read from PostgreSQL), with the upstream's own time
   for the same message counts.

    .venv/bin/python bench/websocket.py [--rounds 20] [--loops 15] [--chain-turns 500] [--samples 30]
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

TOOL = {
    "type": "function",
    "name": "step",
    "description": "One step.",
    "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
}
TERMINAL = ('{"type":"response.completed"', '{"type":"response.incomplete"', '{"type":"response.failed"')


class Socket:
    def __init__(self, gateway: c.Gateway) -> None:
        self.gateway = gateway
        self.ws = None

    async def open(self) -> Socket:
        from websockets.asyncio.client import connect

        url = self.gateway.url.replace("http://", "ws://") + "/v1/responses"
        self.ws = await connect(url, additional_headers=self.gateway.headers, max_size=None, compression=None)
        return self

    async def turn(self, body: dict) -> tuple[float, str]:
        """Seconds to the terminal event, and the response id."""
        assert self.ws is not None
        payload = json.dumps({"type": "response.create", **body})
        t0 = time.perf_counter()
        await self.ws.send(payload)
        while True:
            message = await self.ws.recv()
            if message.startswith(TERMINAL):
                elapsed = time.perf_counter() - t0
                if not message.startswith(TERMINAL[0]) and not message.startswith(TERMINAL[1]):
                    raise RuntimeError(message[:300])
                return elapsed, json.loads(message)["response"]["id"]
            if message.startswith('{"type":"error","status"'):
                raise RuntimeError(message[:300])

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


async def http_turn(http: c.RawHttp, body: dict, stream: bool) -> tuple[float, str]:
    res = await http.request(
        "POST", "/v1/responses", json.dumps({**body, "stream": stream}).encode(), sse=stream, keep_body=True
    )
    if not res.ok:
        raise RuntimeError(f"HTTP {res.status}: {(res.body or b'')[:300]!r} {res.error}")
    text = (res.body or b"").decode()
    marker = '"id":"resp_'
    start = text.index(marker) + len('"id":"')
    return res.total, text[start : text.index('"', start)]


def first_turn() -> dict:
    return {"model": "toolcall", "input": "run the loop", "tools": [TOOL]}


def next_turn(previous: str) -> dict:
    return {
        "model": "toolcall",
        "previous_response_id": previous,
        "tools": [TOOL],
        "input": [{"type": "function_call_output", "call_id": "call_step", "output": "ok"}],
    }


def chat_body(model: str, pairs: int, *, tool_loop: bool) -> bytes:
    """The Chat Completions request the gateway sends for a context of `pairs` turns."""
    messages: list[dict] = [{"role": "user", "content": "run the loop" if tool_loop else "turn 0"}]
    for i in range(pairs):
        if tool_loop:
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_step", "type": "function", "function": {"name": "step", "arguments": '{"n":1}'}}
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": "call_step", "content": "ok"})
        else:
            messages.append({"role": "assistant", "content": f"echo: turn {i}"})
            messages.append({"role": "user", "content": f"turn {i + 1}"})
    body: dict = {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True}}
    if tool_loop:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": "step",
                    "description": "One step.",
                    "parameters": TOOL["parameters"],
                    "strict": True,
                },
            }
        ]
    return json.dumps(body).encode()


async def upstream_time(direct: c.RawHttp, body: bytes, samples: int) -> float:
    times = []
    for _ in range(samples):
        res = await direct.request("POST", "/chat/completions", body, sse=True)
        if not res.ok:
            raise RuntimeError(f"upstream: {res.status} {res.error}")
        times.append(res.total)
    return c.pct(times, 50)


async def tool_loops(gateway: c.Gateway, upstream: c.Upstream, rounds: int, loops: int) -> dict:
    http = c.RawHttp(gateway.url, gateway.headers)
    direct = c.RawHttp(upstream.base_url)
    per_round: dict[str, list[list[float]]] = {"websocket": [], "http_sse": [], "http_json": []}
    for loop in range(loops + 1):  # loop 0 warms everything up and is not counted
        for transport in per_round:
            times: list[float] = []
            if transport == "websocket":
                sock = await Socket(gateway).open()
                elapsed, previous = await sock.turn(first_turn())
                for _ in range(rounds - 1):
                    elapsed, previous = await sock.turn(next_turn(previous))
                    times.append(elapsed)
                await sock.close()
            else:
                stream = transport == "http_sse"
                elapsed, previous = await http_turn(http, first_turn(), stream)
                for _ in range(rounds - 1):
                    elapsed, previous = await http_turn(http, next_turn(previous), stream)
                    times.append(elapsed)
            if loop:
                per_round[transport].append(times)
    upstream_by_round = [
        await upstream_time(direct, chat_body("toolcall", k, tool_loop=True), 7) for k in range(1, rounds)
    ]
    out: dict = {
        "rounds": rounds,
        "loops": loops,
        "upstream_round_ms": round(sum(upstream_by_round) / len(upstream_by_round) * 1000, 3),
    }
    for transport, loops_times in per_round.items():
        flat = [t for times in loops_times for t in times]
        added = [times[k] - upstream_by_round[k] for times in loops_times for k in range(len(times))]
        out[transport] = {"round_ms": c.summary(flat, 1000), "added_ms": c.summary(added, 1000)}
    http.close()
    direct.close()
    return out


async def chains(gateway: c.Gateway, upstream: c.Upstream, turns: int, samples: int) -> dict:
    http = c.RawHttp(gateway.url, gateway.headers)
    direct = c.RawHttp(upstream.base_url)
    # The long chain, built on one socket (stored, so HTTP can continue it too).
    sock = await Socket(gateway).open()
    _, head = await sock.turn({"model": "echo", "input": "turn 0"})
    started = time.perf_counter()
    for i in range(1, turns):
        _, head = await sock.turn({"model": "echo", "input": f"turn {i}", "previous_response_id": head})
    c.log(f"built a {turns}-turn chain over one WebSocket in {time.perf_counter() - started:.1f} s")
    long_head = head
    ws_long, http_long, ws_short, http_short = [], [], [], []
    for i in range(samples):
        # WebSocket, on top of the long chain: the socket's memory (the chain keeps growing by one).
        elapsed, head = await sock.turn({"model": "echo", "input": f"more {i}", "previous_response_id": head})
        ws_long.append(elapsed)
        # HTTP on top of the same long head (read from PostgreSQL every time).
        elapsed, _ = await http_turn(
            http, {"model": "echo", "input": f"more {i}", "previous_response_id": long_head}, True
        )
        http_long.append(elapsed)
        # A 1-turn chain, continued once, on a fresh socket and over HTTP.
        short = await Socket(gateway).open()
        _, base = await short.turn({"model": "echo", "input": "turn 0"})
        elapsed, _ = await short.turn({"model": "echo", "input": "turn 1", "previous_response_id": base})
        ws_short.append(elapsed)
        await short.close()
        elapsed, _ = await http_turn(http, {"model": "echo", "input": "turn 1", "previous_response_id": base}, True)
        http_short.append(elapsed)
    await sock.close()
    up_long = await upstream_time(direct, chat_body("echo", turns, tool_loop=False), samples)
    up_short = await upstream_time(direct, chat_body("echo", 1, tool_loop=False), samples)
    med = lambda v: c.pct(v, 50)  # noqa: E731 - a one-line helper
    out = {
        "turns": turns,
        "samples": samples,
        "upstream_ms": {"short": round(up_short * 1000, 3), "long": round(up_long * 1000, 3)},
        "websocket_ms": {"short": c.summary(ws_short, 1000), "long": c.summary(ws_long, 1000)},
        "http_sse_ms": {"short": c.summary(http_short, 1000), "long": c.summary(http_long, 1000)},
        "ratio_long_over_short": {
            "websocket": round(med(ws_long) / med(ws_short), 2),
            "http_sse": round(med(http_long) / med(http_short), 2),
            "websocket_gateway_added": round((med(ws_long) - up_long) / (med(ws_short) - up_short), 2),
            "http_sse_gateway_added": round((med(http_long) - up_long) / (med(http_short) - up_short), 2),
        },
    }
    http.close()
    direct.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--loops", type=int, default=15)
    parser.add_argument("--chain-turns", type=int, default=500)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    c.use_uvloop()
    base = c.run_dir("websocket")
    pg = c.start_postgres(base)
    upstream = c.Upstream(latency=0.0, log_dir=base)
    gateway = c.Gateway(
        db_url=pg.url,
        providers={"up": upstream.base_url},
        models={"toolcall": ("up", "toolcall"), "echo": ("up", "echo")},
        log_dir=base,
    )
    try:
        loop_result = asyncio.run(tool_loops(gateway, upstream, args.rounds, args.loops))
        chain_result = asyncio.run(chains(gateway, upstream, args.chain_turns, args.samples))
    finally:
        gateway.stop()
        upstream.stop()
        pg.stop()
    ws_added = loop_result["websocket"]["added_ms"]["median"]
    http_added = loop_result["http_sse"]["added_ms"]["median"]
    result = {
        "tool_loop": loop_result,
        "chain": chain_result,
        "websocket_added_vs_http_sse": round(1 - ws_added / http_added, 3),
    }
    c.write_result("websocket", result)
    print(json.dumps(result, indent=2))
    print(
        f"\ntool loop, gateway-added per round (median): WebSocket {ws_added:.3f} ms, "
        f"HTTP SSE {http_added:.3f} ms, HTTP JSON {loop_result['http_json']['added_ms']['median']:.3f} ms "
        f"-> WebSocket {result['websocket_added_vs_http_sse'] * 100:.0f}% lower than HTTP SSE"
    )
    ratios = chain_result["ratio_long_over_short"]
    print(
        f"continuation on a {args.chain_turns}-turn chain / on a 1-turn chain (median round time): "
        f"WebSocket {ratios['websocket']}x, HTTP SSE {ratios['http_sse']}x "
        f"(gateway-added only: {ratios['websocket_gateway_added']}x, {ratios['http_sse_gateway_added']}x)"
    )


if __name__ == "__main__":
    main()
