"""History lists stay fast with 100,000 stored responses (PostgreSQL: the production database).

Seeds 100,000 responses (chains of 10, two tenants, five models, one input and
one output item each) with bulk_create in batches, then times every list
shape through the selectors. Bounds are generous (CI machines are small); the
timings are printed (`pytest -s`) so a regression shows before it fails.
"""
from __future__ import annotations

import random
import time
from datetime import timedelta
from typing import Any, Callable

import pytest
from django.db import connection

from responses_api.history import selectors
from responses_api.history.selectors import ResponseFilters
from responses_api.models import Item, Response, ResponseItem, Tenant
from tests.history.factories import T0

pytestmark = pytest.mark.django_db

TOTAL = 100_000
BATCH = 5_000
CHAIN = 10
MODELS = ["gpt-large", "gpt-small", "claude-ish", "llama-local", "mistral-ish"]
WORDS = ("invoice refund shipping weather recipe travel contract python kernel garden music "
         "football budget meeting poem translation summary database deploy").split()
PAGE_BOUND_MS = 200.0
USAGE_BOUND_MS = 1500.0


def _seed() -> dict[str, Any]:
    rng = random.Random(42)
    acme = Tenant.objects.create(name="acme-scale")
    globex = Tenant.objects.create(name="globex-scale")
    facts: dict[str, Any] = {"acme": acme.id, "roots": [], "rare_ids": []}
    started = time.perf_counter()
    for start in range(0, TOTAL, BATCH):
        responses: list[Response] = []
        items: list[Item] = []
        for i in range(start, start + BATCH):
            tenant = acme if i % 10 < 9 else globex
            rid = f"resp_scale{i:07d}"
            created = T0 - timedelta(days=90) + timedelta(seconds=i * 77)
            # chains of CHAIN consecutive responses of one tenant (i, i+10, i+20, ...)
            previous = f"resp_scale{i - 10:07d}" if (i // 10) % CHAIN else None
            if previous is None and tenant is acme and len(facts["roots"]) < 5:
                facts["roots"].append(rid)
            status = "completed" if i % 50 else ("failed" if i % 100 else "incomplete")
            rare = i % 997 == 0
            question = " ".join(rng.choices(WORDS, k=8)) + (" zeppelin" if rare else "")
            answer = " ".join(rng.choices(WORDS, k=20))
            if rare and tenant is acme:
                facts["rare_ids"].append(rid)
            responses.append(Response(
                id=rid, tenant=tenant, previous_response_id=previous, status=status, model=MODELS[i % 5],
                params={"metadata": {"project": f"p{i % 40}"}}, metadata={"project": f"p{i % 40}",
                                                                        "env": "prod" if i % 3 else "dev"},
                input_tokens=100 + i % 900, output_tokens=20 + i % 300, created_at=created,
                completed_at=created + timedelta(seconds=2), latency_ms=500 + i % 2000,
            ))
            items.append(Item(tenant=tenant, public_id=f"msg_in{i}", type="message", data={
                "type": "message", "id": f"msg_in{i}", "role": "user", "status": "completed",
                "content": [{"type": "input_text", "text": question}]}))
            items.append(Item(tenant=tenant, public_id=f"msg_out{i}", type="message", data={
                "type": "message", "id": f"msg_out{i}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": answer, "annotations": [], "logprobs": []}]}))
        Response.objects.bulk_create(responses)
        Item.objects.bulk_create(items)  # ids come back (RETURNING) for the links
        ResponseItem.objects.bulk_create([
            ResponseItem(response_id=responses[k // 2].id, item_id=item.id, role=k % 2, position=0)
            for k, item in enumerate(items)
        ])
    facts["seed_seconds"] = time.perf_counter() - started
    with connection.cursor() as cursor:  # fresh planner statistics for the rows of this transaction
        cursor.execute("ANALYZE responses_api_response, responses_api_item, responses_api_responseitem")
    return facts


def _best_ms(fn: Callable[[], Any], runs: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        best = min(best, (time.perf_counter() - started) * 1000)
    return best, result


def test_history_lists_with_100k_responses() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("scale test runs on PostgreSQL only (the embedded SQLite run is not the production database)")
    facts = _seed()
    acme = facts["acme"]
    print(f"\nseeded {TOTAL:,} responses, {2 * TOTAL:,} items in {facts['seed_seconds']:.1f} s")
    assert Response.objects.count() == TOTAL

    def page(filters: ResponseFilters = ResponseFilters(), after: str | None = None,
             tenant: int | None = acme, order: str = "desc") -> Any:
        return selectors.response_list_page(tenant_id=tenant, filters=filters, after=after, limit=20, order=order)

    first = page()
    chain_head = page(ResponseFilters(root=facts["roots"][2])).data[0]["id"]
    cases: list[tuple[str, Callable[[], Any], float]] = [
        ("list, newest first", lambda: page(), PAGE_BOUND_MS),
        ("list, oldest first", lambda: page(order="asc"), PAGE_BOUND_MS),
        ("list, page 2 (after)", lambda: page(after=first.data[-1]["id"]), PAGE_BOUND_MS),
        ("list, admin (every tenant)", lambda: page(tenant=None), PAGE_BOUND_MS),
        ("filter model", lambda: page(ResponseFilters(model="claude-ish")), PAGE_BOUND_MS),
        ("filter status=failed", lambda: page(ResponseFilters(status=("failed",))), PAGE_BOUND_MS),
        ("filter created window", lambda: page(ResponseFilters(
            created_after=T0 - timedelta(days=40), created_before=T0 - timedelta(days=39))), PAGE_BOUND_MS),
        ("filter metadata", lambda: page(ResponseFilters(metadata=(("project", "p7"),))), PAGE_BOUND_MS),
        ("filter metadata (2 keys)", lambda: page(ResponseFilters(
            metadata=(("env", "dev"), ("project", "p7")))), PAGE_BOUND_MS),
        ("filter previous_response_id", lambda: page(ResponseFilters(
            previous_response_id=facts["roots"][0])), PAGE_BOUND_MS),
        ("filter root (chain)", lambda: page(ResponseFilters(root=facts["roots"][1])), PAGE_BOUND_MS),
        ("q, rare word", lambda: page(ResponseFilters(q="zeppelin")), PAGE_BOUND_MS),
        ("q, common word", lambda: page(ResponseFilters(q="invoice")), PAGE_BOUND_MS),
        ("q + model", lambda: page(ResponseFilters(q="zeppelin", model="gpt-large")), PAGE_BOUND_MS),
        ("thread of a 10-response chain", lambda: selectors.thread_page(
            tenant_id=acme, response_id=chain_head,
            after=None, limit=20, order="asc"), PAGE_BOUND_MS),
        ("usage per model per day (90 days)", lambda: selectors.usage_summary(
            tenant_id=acme, group_by=("model", "day")), USAGE_BOUND_MS),
        ("usage per model, last 7 days", lambda: selectors.usage_summary(
            tenant_id=acme, group_by=("model",), start=T0 - timedelta(days=7)), USAGE_BOUND_MS),
    ]
    timings = []
    for name, fn, bound in cases:
        ms, result = _best_ms(fn)
        timings.append((name, ms, bound, result))
    print(f"{'case':40} {'best of 3':>10} {'bound':>8}")
    for name, ms, bound, _ in timings:
        print(f"{name:40} {ms:8.1f}ms {bound:6.0f}ms")

    results = {name: result for name, _, _, result in timings}
    assert len(results["list, newest first"].data) == 20 and results["list, newest first"].has_more
    assert len(results["filter root (chain)"].data) == CHAIN
    rare = [r["id"] for r in results["q, rare word"].data]
    assert rare == sorted(facts["rare_ids"], reverse=True)[:20]
    assert all(r["model"] == "claude-ish" for r in results["filter model"].data)
    assert len(results["thread of a 10-response chain"].data) == 20
    assert facts["seed_seconds"] < 60, "seeding 100k responses should take well under a minute"
    slow = [(name, round(ms, 1), bound) for name, ms, bound, _ in timings if ms > bound]
    assert not slow, f"over their bounds: {slow}"
