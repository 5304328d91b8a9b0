"""Client payload: bytes a client sends over a 20-round tool loop, previous_response_id vs full history.

The scripted upstream runs in this process (ScriptedUpstream, enqueue()):
every round but the last the model calls a function tool, the last round it
answers with text. The client answers each call with a function_call_output
(a ~600-byte JSON tool result, like a typical API lookup) and sends, per round:

* chained: `previous_response_id` + only the new function_call_output;
* full history: `store: false` and the whole conversation so far (user
  message, every function_call and function_call_output), as a stateless
  client does.

Both send the same `instructions` and `tools` every round (neither carries
over in the Responses API). Bytes are counted on the wire: request line,
headers and body (and the body alone). The context the upstream receives in
the last round is checked to be the same in both modes.

    /tmp/venv/bin/python bench/payload.py [--rounds 20]
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

from tests.support.upstream import Reply, ScriptedUpstream

MODEL = "tool-model"
INSTRUCTIONS = (
    "You are a travel assistant. Use the tools to look up flights, hotels and weather, "
    "then answer with a short itinerary."
)
TOOLS = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look up travel data (flights, hotels, weather).",
        "parameters": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["flight", "hotel", "weather"]},
                "city": {"type": "string"},
                "day": {"type": "integer"},
            },
            "required": ["kind", "city", "day"],
            "additionalProperties": False,
        },
        "strict": True,
    },
]
CITIES = ["Paris", "Lyon", "Nice", "Rome", "Milan", "Madrid", "Lisbon", "Porto", "Berlin", "Vienna"]


def tool_result(round_no: int) -> str:
    """A realistic ~600-byte JSON tool result."""
    return json.dumps(
        {
            "round": round_no,
            "city": CITIES[round_no % len(CITIES)],
            "currency": "EUR",
            "results": [
                {
                    "id": f"opt-{round_no}-{k}",
                    "name": f"Option {k} in {CITIES[(round_no + k) % len(CITIES)]}",
                    "price": 80 + 17 * k + round_no,
                    "rating": round(3.5 + 0.3 * k, 1),
                    "notes": "refundable until 24h before; breakfast included",
                }
                for k in range(4)
            ],
        }
    )


def script(upstream: ScriptedUpstream, rounds: int) -> None:
    replies = [
        Reply(
            tool_calls=[
                {
                    "id": f"call_{r}",
                    "name": "lookup",
                    "arguments": {
                        "kind": ["flight", "hotel", "weather"][r % 3],
                        "city": CITIES[r % len(CITIES)],
                        "day": r,
                    },
                }
            ]
        )
        for r in range(1, rounds)
    ]
    replies.append(Reply(text="Day 1: fly to Paris. Day 2: train to Lyon. Day 3: Nice, sunny. Enjoy the trip!"))
    upstream.enqueue(MODEL, *replies)


async def run_mode(gw: c.Gateway, upstream: ScriptedUpstream, rounds: int, chained: bool) -> dict:
    script(upstream, rounds)
    cl = c.RawHttp(f"{gw.url}/v1", gw.headers)
    history: list[dict] = [
        {"type": "message", "role": "user", "content": "Plan a 3-day trip through France for two people in May."}
    ]
    previous: str | None = None
    new_input: list[dict] = list(history)
    per_round = []
    final_text = None
    for r in range(1, rounds + 1):
        body: dict = {"model": MODEL, "instructions": INSTRUCTIONS, "tools": TOOLS}
        if chained:
            body["input"] = new_input
            if previous:
                body["previous_response_id"] = previous
        else:
            body["input"] = history
            body["store"] = False
        raw = json.dumps(body, separators=(",", ":")).encode()
        res = await cl.request("POST", "/responses", raw, keep_body=True, timeout=60)
        if not res.ok:
            raise RuntimeError(f"round {r} failed: {res.status} {res.error} {(res.body or b'')[:400]!r}")
        resp = json.loads(res.body or b"{}")
        per_round.append(
            {
                "round": r,
                "request_bytes": res.sent_bytes,
                "body_bytes": len(raw),
                "response_bytes": len(res.body or b""),
                "latency_ms": round(res.total * 1000, 2),
            }
        )
        previous = resp["id"]
        calls = [o for o in resp["output"] if o["type"] == "function_call"]
        history += resp["output"]
        if not calls:
            final_text = "".join(
                p.get("text", "") for o in resp["output"] if o["type"] == "message" for p in o["content"]
            )
            break
        outputs = [
            {"type": "function_call_output", "call_id": call["call_id"], "output": tool_result(r)} for call in calls
        ]
        history += outputs
        new_input = outputs
    cl.close()
    last = upstream.requests[-1].body
    return {
        "rounds": len(per_round),
        "total_request_bytes": sum(x["request_bytes"] for x in per_round),
        "total_body_bytes": sum(x["body_bytes"] for x in per_round),
        "total_response_bytes": sum(x["response_bytes"] for x in per_round),
        "last_round_body_bytes": per_round[-1]["body_bytes"],
        "upstream_messages_last_round": len(last.get("messages", [])),
        "final_text": final_text,
        "per_round": per_round,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    c.use_uvloop()
    t_begin = time.perf_counter()
    d = c.run_dir("payload")
    pg = c.start_postgres(d)
    upstream = ScriptedUpstream().start()
    c.log(f"in-process scripted upstream at {upstream.base_url}")
    gw = c.Gateway(
        db_url=pg.url, providers={"scripted": upstream.base_url}, models={MODEL: ("scripted", MODEL)}, log_dir=d
    )
    try:
        chained = asyncio.run(run_mode(gw, upstream, args.rounds, chained=True))
        upstream.reset()
        full = asyncio.run(run_mode(gw, upstream, args.rounds, chained=False))
    finally:
        gw.stop()
        upstream.stop()
        pg.stop()
    same_context = chained["upstream_messages_last_round"] == full["upstream_messages_last_round"]
    ratio = full["total_request_bytes"] / chained["total_request_bytes"]
    print()
    print(f"{'round':>5}  {'chained bytes':>13}  {'full-history bytes':>18}")
    for a, b in zip(chained["per_round"], full["per_round"]):
        print(f"{a['round']:>5}  {a['request_bytes']:>13}  {b['request_bytes']:>18}")
    print(
        f"total bytes sent over {chained['rounds']} rounds: previous_response_id {chained['total_request_bytes']:,}"
        f" vs full history {full['total_request_bytes']:,} ({ratio:.1f}x; bodies "
        f"{chained['total_body_bytes']:,} vs {full['total_body_bytes']:,})"
    )
    print(
        f"upstream saw the same context in the last round: {same_context} "
        f"({chained['upstream_messages_last_round']} vs {full['upstream_messages_last_round']} messages)"
    )
    print()
    c.write_result(
        "payload",
        {
            "args": vars(args),
            "headline": {
                "chained_total_request_bytes": chained["total_request_bytes"],
                "full_history_total_request_bytes": full["total_request_bytes"],
                "ratio_full_over_chained": round(ratio, 2),
                "same_upstream_context": same_context,
            },
            "chained": chained,
            "full_history": full,
            "runtime_s": round(time.perf_counter() - t_begin, 1),
        },
    )
    plt = c.pyplot()
    if plt is not None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for data, label in ((chained, "previous_response_id"), (full, "full history")):
            rounds = [x["round"] for x in data["per_round"]]
            axes[0].plot(rounds, [x["request_bytes"] for x in data["per_round"]], "o-", label=label)
            cum, acc = [], 0
            for x in data["per_round"]:
                acc += x["request_bytes"]
                cum.append(acc / 1024)
            axes[1].plot(rounds, cum, "o-", label=label)
        axes[0].set_title("bytes sent per round")
        axes[1].set_title("cumulative KiB sent")
        for ax in axes:
            ax.set_xlabel("round")
            ax.legend()
        c.save_plot(fig, "payload")


if __name__ == "__main__":
    main()
