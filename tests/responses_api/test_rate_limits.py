"""Rate limits and budgets through the gateway, with the real `openai` SDK: per key and per
tenant, requests / tokens per minute, concurrent requests, token and cost budgets. Runs on
both suites: Redis counters (PostgreSQL suite) and in-process counters (embedded)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from django.conf import settings

from tests.responses_api.test_anthropic import CLAUDE, anthropic  # noqa: F401 - the fixture
from tests.support.errors import error_body
from tests.support.harness import MODEL, Gateway, forget_redis_keys, make_key
from tests.support.stream_validator import validate_sse
from tests.support.upstream import Reply, ScriptedUpstream

if TYPE_CHECKING:
    from responses_api.models import ApiKey, Tenant

pytestmark = pytest.mark.embedded


@pytest.fixture(autouse=True)
def _fresh_counters(fresh_limits) -> None:
    """Every test here starts and ends with empty counters (conftest's `fresh_limits`)."""


def set_limits(model_cls: type[ApiKey] | type[Tenant], pk: int, **fields: object) -> None:
    from responses_api.api import auth

    model_cls.objects.filter(pk=pk).update(**fields)
    auth.clear_cache()  # the gateway serves in this process: its key cache sees the change now


def key_id(raw: str) -> int:
    from responses_api.models import ApiKey

    return ApiKey.objects.get(prefix=raw.split("_")[0].removeprefix("sk-gw-")).id


def create(gateway: Gateway, key: str | None = None, **body: object) -> httpx.Response:
    with gateway.http(key) as client:
        return client.post("/v1/responses", json={"model": MODEL, "input": "hi", **body})


def test_requests_per_minute_per_key_with_openai_headers(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey

    scripted.set_default(MODEL, Reply(text="ok"))
    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=3)
    remaining = []
    for _ in range(3):
        reply = create(gateway)
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-ratelimit-limit-requests"] == "3"
        remaining.append(int(reply.headers["x-ratelimit-remaining-requests"]))
        assert reply.headers["x-ratelimit-reset-requests"].endswith("s")
    assert remaining == [2, 1, 0]
    calls = len(scripted.model_calls)
    with pytest.raises(openai.RateLimitError) as refused:
        gateway.openai().responses.create(model=MODEL, input="one more")
    error = error_body(refused.value)
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
    assert "requests per minute" in error["message"] and "API key 'test'" in error["message"]
    retry_after = int(refused.value.response.headers["retry-after"])
    assert 1 <= retry_after <= 20  # one request's refill at 3 per minute
    assert len(scripted.model_calls) == calls  # refused before any upstream call
    # A refused request is not stored either.
    from responses_api.models import Response

    assert Response.objects.filter(tenant_id=gateway.tenant_id).count() == 3


def test_a_tenants_limit_is_shared_by_its_keys_and_not_by_other_tenants(
    gateway: Gateway,
    scripted: ScriptedUpstream,
) -> None:
    from responses_api.models import Tenant

    scripted.set_default(MODEL, Reply(text="ok"))
    second, _ = make_key(tenant="acme", name="second")
    other, _ = make_key(tenant="other", name="elsewhere")
    set_limits(Tenant, gateway.tenant_id, requests_per_minute=2)
    assert create(gateway).status_code == 200
    assert create(gateway, second).status_code == 200
    refused = create(gateway, second)
    assert refused.status_code == 429 and "tenant 'acme'" in refused.json()["error"]["message"]
    assert create(gateway).status_code == 429
    for _ in range(3):
        assert create(gateway, other).status_code == 200  # another tenant: untouched


def test_tokens_per_minute_reserve_the_estimate_and_settle_the_real_usage(
    gateway: Gateway,
    scripted: ScriptedUpstream,
) -> None:
    from responses_api.models import ApiKey

    set_limits(ApiKey, key_id(gateway.key), tokens_per_minute=1000)
    # 900 reserved (max_output_tokens), 12 used: the rest comes back at the end.
    scripted.enqueue(MODEL, Reply(text="ok", usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}))
    first = create(gateway, max_output_tokens=900)
    assert first.status_code == 200
    assert int(first.headers["x-ratelimit-remaining-tokens"]) < 100  # the reservation, at admission
    scripted.enqueue(MODEL, Reply(text="ok", usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}))
    second = create(gateway, max_output_tokens=900)  # fits only because the first settled
    assert second.status_code == 200, second.text
    assert int(second.headers["x-ratelimit-limit-tokens"]) == 1000
    # Real usage above the estimate puts the bucket in debt, which the next request waits out.
    scripted.enqueue(
        MODEL, Reply(text="ok", usage={"prompt_tokens": 1500, "completion_tokens": 500, "total_tokens": 2000})
    )
    assert create(gateway).status_code == 200
    refused = create(gateway)
    assert refused.status_code == 429
    body = refused.json()["error"]
    assert "tokens per minute" in body["message"] and body["code"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 60  # a minute's worth of debt to refill


def test_concurrent_requests_hold_a_lease_until_the_stream_ends(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from responses_api.models import ApiKey
    from responses_api.orchestration import limits

    # A deployed web process beats (liveness.py) and so holds renewed leases of
    # GATEWAY_LEASE_SECONDS; the gateway under test runs in a thread, which does not beat, and
    # whether an earlier test of this process started a beat is not this test's business.
    monkeypatch.setattr(limits, "_renewal_on", True)
    set_limits(ApiKey, key_id(gateway.key), max_concurrent_requests=1)
    scripted.enqueue(MODEL, Reply(text="slow words " * 10, chunk_chars=6, interval=0.05))
    client = gateway.openai()
    with (
        gateway.http() as http,
        http.stream(
            "POST",
            "/v1/responses",
            json={"model": MODEL, "input": "long", "stream": True},
        ) as stream,
    ):
        chunks = stream.iter_bytes()
        raw = [next(chunks)]
        with pytest.raises(openai.RateLimitError) as refused:
            client.responses.create(model=MODEL, input="meanwhile")
        raw += list(chunks)
    assert "concurrent requests" in error_body(refused.value)["message"]
    # When the one lease runs out if its process stopped: GATEWAY_LEASE_SECONDS from its start.
    lease = settings.GATEWAY_LEASE_SECONDS
    assert lease - 10 <= int(refused.value.response.headers["retry-after"]) <= lease
    assert "at the latest if the process serving it stopped" in error_body(refused.value)["message"]
    assert validate_sse(b"".join(raw))["status"] == "completed"
    scripted.enqueue(MODEL, Reply(text="after"))
    deadline = time.monotonic() + 5
    while True:  # the lease goes back as the stream's end is stored, just after its last event
        reply = create(gateway)
        if reply.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("first_lapses_in", "bound", "retry_after"),
    [(12.0, "in 12s at the latest if the process serving it stopped.", 12), (3900.0, None, 30)],
)
def test_a_lease_refusal_promises_a_bound_only_within_a_renewed_lease(
    settings, first_lapses_in: float, bound: str | None, retry_after: int
) -> None:
    """Within GATEWAY_LEASE_SECONDS the first lease in flight lapses if its holder stopped (a web
    process renews its own); a longer one is a background run's (or a process's that does not
    beat), which holds its slot until it ends: no bound is promised for it."""
    from responses_api.orchestration.limits import _refuse
    from responses_api.protocol.errors import RateLimited
    from responses_api.store.limit_counters import Check

    settings.GATEWAY_LEASE_SECONDS = 30
    check = Check(kind="lease", key="k", what="concurrent requests", label="tenant 'acme'", limit=2)
    with pytest.raises(RateLimited) as refused:
        _refuse(check, first_lapses_in)
    message = refused.value.message
    assert message.startswith("Rate limit reached for tenant 'acme' on concurrent requests: limit 2, all in flight.")
    if bound is None:
        assert message.endswith("A slot frees when one of them ends."), message
    else:
        assert message.endswith(f"A slot frees when one of them ends, and {bound}"), message
    assert refused.value.headers == {"Retry-After": str(retry_after)}


def test_a_client_that_leaves_gives_its_lease_back(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey

    set_limits(ApiKey, key_id(gateway.key), max_concurrent_requests=1)
    scripted.enqueue(MODEL, Reply(text="endless " * 200, chunk_chars=4, interval=0.05))
    with (
        gateway.http() as client,
        client.stream(
            "POST",
            "/v1/responses",
            json={"model": MODEL, "input": "x", "stream": True},
        ) as response,
    ):
        lines = response.iter_lines()  # held: a dropped iterator would close the connection
        next(lines)
        assert create(gateway).status_code == 429
    scripted.set_default(MODEL, Reply(text="ok"))
    deadline = time.monotonic() + 5
    while create(gateway).status_code != 200:
        assert time.monotonic() < deadline, "the lease of the client that left was not released"
        time.sleep(0.1)


def test_a_background_run_counts_until_its_worker_ends_it(gateway: Gateway, scripted: ScriptedUpstream, worker) -> None:
    from responses_api.models import Tenant

    set_limits(Tenant, gateway.tenant_id, max_concurrent_requests=1)
    scripted.enqueue(MODEL, Reply(text="background words " * 10, chunk_chars=8, interval=0.05))
    client = gateway.openai()
    started = client.responses.create(model=MODEL, input="go", background=True)
    with pytest.raises(openai.RateLimitError) as refused:
        client.responses.create(model=MODEL, input="meanwhile")
    # The run's lease lasts its window, not a renewed GATEWAY_LEASE_SECONDS: no bound is promised.
    message = error_body(refused.value)["message"]
    assert message.endswith("A slot frees when one of them ends."), message
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= settings.GATEWAY_LEASE_SECONDS
    deadline = time.monotonic() + 30
    while client.responses.retrieve(started.id).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    scripted.set_default(MODEL, Reply(text="ok"))
    deadline = time.monotonic() + 5
    while create(gateway).status_code != 200:
        assert time.monotonic() < deadline, "the worker did not release the lease"
        time.sleep(0.1)


def test_a_token_budget_counts_what_the_period_already_spent(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import Tenant

    scripted.enqueue(MODEL, Reply(text="ok", usage={"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}))
    assert create(gateway).status_code == 200  # spent before the budget existed: still counted
    set_limits(Tenant, gateway.tenant_id, budget_period="day", budget_tokens=100)
    scripted.enqueue(MODEL, Reply(text="ok", usage={"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}))
    assert create(gateway).status_code == 200  # 40 spent < 100
    refused = create(gateway)  # 110 spent
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded" and "daily budget" in error["message"]
    now = datetime.now(UTC)
    to_midnight = 86400 - (now.hour * 3600 + now.minute * 60 + now.second)
    assert abs(int(refused.headers["retry-after"]) - to_midnight) <= 5
    usage = gateway.http().get("/v1/usage").json()
    (budget,) = [entry for entry in usage["limits"] if entry["limit"] == "daily budget"]
    assert budget["value"] == 100 and budget["used"] == 110


def test_store_false_responses_count_in_usage_and_budgets(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """Codex CLI sends `store: false`: no response row is kept, but the tokens were spent, so
    /v1/usage shows them and a budget seeded from the database counts them."""
    from responses_api.models import Tenant, UsageRecord

    usage = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}
    scripted.enqueue(MODEL, Reply(text="ok", usage=usage))
    assert create(gateway, store=False).status_code == 200
    scripted.enqueue(MODEL, Reply(text="ok", usage=usage))
    body = {"model": MODEL, "input": "hi", "store": False, "stream": True}
    with gateway.http() as client, client.stream("POST", "/v1/responses", json=body) as sse:  # as Codex CLI does
        assert sse.status_code == 200 and validate_sse(sse.iter_bytes())["status"] == "completed"
    deadline = time.monotonic() + 5
    while UsageRecord.objects.filter(tenant_id=gateway.tenant_id).count() < 2:  # written just after the answer
        assert time.monotonic() < deadline, "no usage record for a store: false response"
        time.sleep(0.05)
    rows = list(UsageRecord.objects.filter(tenant_id=gateway.tenant_id))
    assert {(r.endpoint, r.model, r.input_tokens, r.output_tokens, r.api_key_id) for r in rows} == {
        ("responses (store: false)", MODEL, 30, 10, key_id(gateway.key))
    }
    (bucket,) = gateway.http().get("/v1/usage", params={"group_by": "model"}).json()["data"]
    assert (bucket["model"], bucket["requests"], bucket["total_tokens"]) == (MODEL, 2, 80)
    set_limits(Tenant, gateway.tenant_id, budget_period="day", budget_tokens=100)
    scripted.enqueue(MODEL, Reply(text="ok", usage=usage))
    assert create(gateway, store=False).status_code == 200  # 80 spent < 100
    refused = create(gateway, store=False)  # 120 spent
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"


def test_compact_answers_carry_the_rate_limit_headers(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey

    scripted.set_default(MODEL, Reply(text="A summary."))
    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=5)
    with gateway.http() as client:
        reply = client.post("/v1/responses/compact", json={"model": MODEL, "input": "hi"})
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-ratelimit-limit-requests"] == "5"
    assert reply.headers["x-ratelimit-remaining-requests"] == "4"


def test_input_token_counts_take_from_the_request_limit(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """A count may call the upstream's tokenizer: it is a request like any other, though it
    reserves no tokens."""
    from responses_api.models import ApiKey

    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=2, tokens_per_minute=1000)
    body = {"model": MODEL, "input": "How many tokens is this?"}
    with gateway.http() as client:
        first = client.post("/v1/responses/input_tokens", json=body)
        assert first.status_code == 200, first.text
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        assert first.headers["x-ratelimit-remaining-tokens"] == "999"  # one reserved while it counts
        second = client.post("/v1/responses/input_tokens", json=body)
        assert second.status_code == 200
        assert second.headers["x-ratelimit-remaining-tokens"] == "999"  # the first one's was given back
        refused = client.post("/v1/responses/input_tokens", json=body)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert "requests per minute" in refused.json()["error"]["message"]


def test_a_budget_seeded_just_after_a_store_false_call_counts_it(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    """The call's usage record may still be queued (store/usage.py) when the budget's counter is
    seeded from the database: the seed writes the queue first."""
    from responses_api.models import Tenant

    scripted.set_default(
        MODEL, Reply(text="ok", usage={"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40})
    )
    assert create(gateway, store=False).status_code == 200  # 40 tokens, before any budget
    set_limits(Tenant, gateway.tenant_id, budget_period="day", budget_tokens=50)  # at once: within the queue's 0.5 s
    assert create(gateway, store=False).status_code == 200  # seeded with 40 < 50; now 80
    refused = create(gateway, store=False)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"


def test_a_cost_budget_prices_tokens_with_the_routes_price_table(
    gateway: Gateway,
    scripted: ScriptedUpstream,
) -> None:
    from responses_api.models import ModelRoute, Tenant
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name=MODEL).update(
        input_usd_per_million=Decimal("1000"), output_usd_per_million=Decimal("4000")
    )
    routing.clear_cache()
    set_limits(Tenant, gateway.tenant_id, budget_period="month", budget_usd=Decimal("0.05"))
    # 10 * 1000 + 5 * 4000 = 30,000 micro-USD = $0.03 each.
    scripted.set_default(
        MODEL, Reply(text="ok", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    )
    assert create(gateway).status_code == 200
    assert create(gateway).status_code == 200
    refused = create(gateway)
    assert refused.status_code == 429 and "monthly budget" in refused.json()["error"]["message"]
    (budget,) = gateway.http().get("/v1/usage").json()["limits"]
    assert budget["usd"] == 0.05 and budget["used_usd"] == pytest.approx(0.06)


def test_a_cost_budget_on_an_anthropic_route_counts_cache_writes(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    """Anthropic reports cache writes apart from input (`cache_creation_input_tokens`), and
    charges them 1.25x the input price. The stored rows' `cache_write_tokens` are also set here
    by hand, so the check stands apart from the counting (tested in test_cache_writes.py): what
    this checks is that the budget's count from the store (its seed) and /v1/usage price them."""
    from responses_api.models import ModelRoute, Response, Tenant
    from responses_api.orchestration import routing
    from responses_api.store import limit_counters

    ModelRoute.objects.filter(name=CLAUDE).update(input_usd_per_million=Decimal("10000"))  # 10,000 micro-USD a token
    routing.clear_cache()
    set_limits(Tenant, anthropic.tenant_id, budget_period="month", budget_usd=Decimal("0.65"))
    usage = {"input_tokens": 10, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 0, "output_tokens": 0}
    scripted.set_default("claude-up", Reply(text="ok", usage=usage))

    def one() -> httpx.Response:
        with anthropic.http() as http:
            return http.post("/v1/responses", json={"model": CLAUDE, "input": "hi"})

    assert one().status_code == 200
    (first,) = Response.objects.filter(tenant_id=anthropic.tenant_id)
    assert first.input_tokens == 30  # OpenAI's input counts the writes
    Response.objects.filter(pk=first.pk).update(cache_write_tokens=20)
    # The counters forget (Redis restarted, or a new period): the next request seeds them from the
    # store, 10 x 10,000 + 20 x 12,500 = 350,000 micro-USD (300,000 if the writes were priced as input).
    limit_counters.reset_store()
    forget_redis_keys("gw:rl:*")
    assert one().status_code == 200  # 350,000 + 300,000 (350,000 once the writes are counted live): all spent
    refused = one()
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"
    Response.objects.filter(tenant_id=anthropic.tenant_id).update(cache_write_tokens=20)
    body = anthropic.http().get("/v1/usage", params={"group_by": "model"}).json()
    assert body["data"][0]["cache_write_tokens"] == 40 and body["data"][0]["cost_usd"] == 0.7


def test_chat_completions_and_embeddings_share_the_limits(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey

    scripted.set_default(MODEL, Reply(text="ok"))
    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=2)
    client = gateway.openai()
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-ratelimit-remaining-requests"] == "1"
    assert create(gateway).status_code == 200
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.RateLimitError):
        client.embeddings.create(model=MODEL, input="hi")


def test_the_usage_api_shows_each_limit_with_its_use(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey, Tenant

    scripted.set_default(MODEL, Reply(text="ok"))
    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=10, max_concurrent_requests=4)
    set_limits(Tenant, gateway.tenant_id, tokens_per_minute=10_000)
    scripted.set_default(
        MODEL, Reply(text="ok", usage={"prompt_tokens": 100, "completion_tokens": 100, "total_tokens": 200})
    )
    assert gateway.http().get("/v1/usage").json()["limits"][0]["used"] == 0
    for _ in range(3):
        assert create(gateway).status_code == 200
    limits = {(e["scope"], e["limit"]): e for e in gateway.http().get("/v1/usage").json()["limits"]}
    assert limits[("API key 'test'", "requests per minute")]["value"] == 10
    assert limits[("API key 'test'", "requests per minute")]["used"] == 3
    assert limits[("API key 'test'", "concurrent requests")]["used"] == 0
    assert 300 < limits[("tenant 'acme'", "tokens per minute")]["used"] <= 600  # refilling at 166 a second
    other, _ = make_key(tenant="free", name="unlimited")
    assert gateway.http(other).get("/v1/usage").json()["limits"] == []


def test_with_the_counter_store_unreachable_the_setting_decides(
    gateway: Gateway,
    scripted: ScriptedUpstream,
    settings,
) -> None:
    from responses_api.models import ApiKey
    from responses_api.store import limit_counters

    scripted.set_default(MODEL, Reply(text="ok"))
    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=1)
    limit_counters.limit_store.instance = limit_counters.RedisLimitStore(
        "redis://127.0.0.1:9/0"
    )  # nothing listens there
    settings.GATEWAY_RATE_LIMIT_FAIL_OPEN = True
    for _ in range(2):  # over the limit, but it cannot be counted: let through (and logged)
        reply = create(gateway)
        assert reply.status_code == 200 and "x-ratelimit-limit-requests" not in reply.headers
    settings.GATEWAY_RATE_LIMIT_FAIL_OPEN = False
    refused = create(gateway)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
    assert refused.json()["error"]["code"] == "service_unavailable"


def test_parallel_requests_never_overshoot(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey

    scripted.set_default(MODEL, Reply(text="ok", delay=0.05))
    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=600, max_concurrent_requests=3)
    statuses: list[int] = []

    def one() -> None:
        statuses.append(create(gateway).status_code)

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(statuses) <= {200, 429}
    assert statuses.count(200) >= 1 and statuses.count(429) >= 1
    assert len(scripted.model_calls) == statuses.count(200)


def test_config_file_sets_tenant_limits_budgets_and_prices(transactional_db, tmp_path) -> None:
    from responses_api.models import ModelRoute, Tenant
    from responses_api.ops.config_sync import ConfigError, sync_config

    config: dict[str, Any] = {
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:1/v1"}],
        "models": [
            {
                "name": "m",
                "targets": [{"provider": "p", "model": "m"}],
                "price": {"input_usd_per_million": 0.5, "output_usd_per_million": 1.5},
            }
        ],
        "tenants": [
            {
                "name": "research",
                "requests_per_minute": 600,
                "tokens_per_minute": 200000,
                "max_concurrent_requests": 20,
                "retention_days": 30,
                "budget": {"period": "month", "tokens": 50_000_000, "usd": 500},
            }
        ],
    }
    assert sync_config(config)["tenants"] == 1
    assert sync_config(config)["tenants"] == 1  # idempotent
    tenant = Tenant.objects.get(name="research")
    assert (tenant.requests_per_minute, tenant.tokens_per_minute, tenant.max_concurrent_requests) == (600, 200000, 20)
    assert (tenant.budget_period, tenant.budget_tokens, tenant.budget_usd) == ("month", 50_000_000, Decimal("500"))
    route = ModelRoute.objects.get(name="m")
    assert (route.input_usd_per_million, route.output_usd_per_million) == (Decimal("0.5"), Decimal("1.5"))
    assert route.cached_input_usd_per_million is None  # the input price, when left out
    cached = {
        "cached_input_usd_per_million": 0.05,
        "cache_write_usd_per_million": 0.7,
        "cache_write_1h_usd_per_million": 1,
    }
    sync_config({**config, "models": [{**config["models"][0], "price": {**config["models"][0]["price"], **cached}}]})
    route = ModelRoute.objects.get(name="m")
    assert (
        route.cached_input_usd_per_million,
        route.cache_write_usd_per_million,
        route.cache_write_1h_usd_per_million,
    ) == (Decimal("0.05"), Decimal("0.7"), Decimal("1"))
    with pytest.raises(ConfigError, match="cache_read_usd_per_million|expected a mapping"):
        sync_config({**config, "models": [{**config["models"][0], "price": {"cache_read_usd_per_million": 1}}]})
    from responses_api.models import ApiKey
    from responses_api.store.services import api_key_create

    key, _ = api_key_create(tenant_name="research", name="ci-bot")
    sync_config(
        {
            "tenants": [
                {
                    "name": "research",
                    "keys": [
                        {"name": "ci-bot", "requests_per_minute": 30, "max_concurrent_requests": 2},
                        {"name": "not-yet", "tokens_per_minute": 1000},
                    ],
                }
            ]
        }
    )
    key.refresh_from_db()
    assert (key.requests_per_minute, key.tokens_per_minute, key.max_concurrent_requests) == (30, None, 2)
    assert not ApiKey.objects.filter(name="not-yet").exists()  # logged; applied once the key exists
    for bad, where in (
        ({"name": "x", "rpm": 1}, "unknown field"),
        ({"name": "x", "budget": {"period": "week"}}, r"tenants\[0\]\.budget\.period"),
        ({"name": "x", "keys": [{"name": "k", "requests_per_minute": 0}]}, "positive integer"),
    ):
        with pytest.raises(ConfigError, match=where):
            sync_config({"tenants": [bad]})


@pytest.fixture
def plain_static(settings):
    # As tests/admin/conftest.py: render {% static %} without collectstatic's manifest.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def test_the_admin_shows_limits_and_their_current_use(
    plain_static,
    admin_client,
    gateway: Gateway,
    scripted: ScriptedUpstream,
) -> None:
    from responses_api.models import ApiKey, Tenant

    scripted.set_default(MODEL, Reply(text="ok"))
    set_limits(Tenant, gateway.tenant_id, requests_per_minute=50, budget_tokens=1_000_000)
    assert create(gateway).status_code == 200
    page = admin_client.get(f"/admin/responses_api/tenant/{gateway.tenant_id}/change/").content.decode()
    assert "Rate limits" in page and "requests per minute" in page and "monthly budget" in page
    key_page = admin_client.get(f"/admin/responses_api/apikey/{key_id(gateway.key)}/change/").content.decode()
    assert "Current use" in key_page and "No limits." in key_page
    reply = admin_client.post(
        f"/admin/responses_api/apikey/{key_id(gateway.key)}/change/",
        {
            "name": "test",
            "allowed_models": "",
            "requests_per_minute": "7",
            "tokens_per_minute": "",
            "max_concurrent_requests": "",
            "budget_period": "month",
            "alert_thresholds": "[80, 100]",
        },
    )
    assert reply.status_code == 302, reply.content.decode()[:2000]
    assert ApiKey.objects.get(id=key_id(gateway.key)).requests_per_minute == 7


def test_a_websocket_turn_over_the_limit_gets_a_429_error_event(gateway: Gateway, scripted: ScriptedUpstream) -> None:
    from responses_api.models import ApiKey
    from tests.websocket.test_websocket_mode import completed, socket, turn

    scripted.set_default(MODEL, Reply(text="ok"))
    set_limits(ApiKey, key_id(gateway.key), requests_per_minute=1, max_concurrent_requests=1)
    with socket(gateway) as ws:
        completed(ws, input="first")  # its lease went back when it ended: only the minute's count binds
        refused = turn(ws, model=MODEL, input="second")
        assert refused[-1]["type"] == "error" and refused[-1]["status"] == 429
        assert refused[-1]["error"]["code"] == "rate_limit_exceeded"
        assert "requests per minute" in refused[-1]["error"]["message"]


def test_an_estimate_above_the_whole_limit_waits_for_a_full_bucket(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    from responses_api.models import ApiKey

    set_limits(ApiKey, key_id(gateway.key), tokens_per_minute=100)
    scripted.set_default(
        MODEL, Reply(text="ok", usage={"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10})
    )
    # 5,000 reserved against a limit of 100: admitted on a full bucket, which it empties...
    first = create(gateway, max_output_tokens=5000)
    assert first.status_code == 200 and first.headers["x-ratelimit-remaining-tokens"] == "0"
    # ...and settled with its real 10 tokens: 90 come back, not 4,990.
    usage = {(e["scope"], e["limit"]): e for e in gateway.http().get("/v1/usage").json()["limits"]}
    assert 8 <= usage[("API key 'test'", "tokens per minute")]["used"] <= 10


def test_parallel_requests_reserve_the_budget_and_only_the_last_may_cross_it(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """On 75d8303 all 20 parallel creates of 110 tokens were admitted against a 300-token daily
    budget (2,310 spent). Admission now reserves each request's input estimate plus its
    max_output_tokens until it ends; what is spent plus what is reserved must fit, and only
    when nothing is reserved may a request take the last of a budget (crossing it once)."""
    from concurrent.futures import ThreadPoolExecutor

    from responses_api.models import Tenant

    usage = {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110}
    scripted.set_default(MODEL, Reply(text="ok", usage=usage, delay=0.5))
    set_limits(Tenant, gateway.tenant_id, budget_period="day", budget_tokens=300)
    assert create(gateway, max_output_tokens=100).status_code == 200  # seeds the counter: 110 spent

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: create(gateway, max_output_tokens=100), range(20)))
    admitted = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(admitted) + len(refused) == 20
    assert {a.json()["error"]["code"] for a in refused} == {"budget_exceeded"}
    spent = 110 + 110 * len(admitted)
    assert spent <= 300 + 110, f"{len(admitted)} admitted: {spent} tokens against a budget of 300"
    assert len(admitted) >= 1
    budget = next(e for e in gateway.http().get("/v1/usage").json()["limits"] if e["limit"] == "daily budget")
    assert budget["used"] == spent


def test_a_token_budget_on_an_unpriced_route_settles_every_reservation(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """An unpriced route reserves 0 micro-USD. Giving that back was `-tonumber('0')` in the Redis
    scripts, Lua's -0, which HINCRBY refuses: the settle stopped half-way and left the
    reservation behind, and once it expired every admission failed (found by bench/capacity.py)."""
    from responses_api.models import Tenant

    usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    scripted.set_default(MODEL, Reply(text="ok", usage=usage))
    set_limits(Tenant, gateway.tenant_id, budget_period="day", budget_tokens=1000)
    for _ in range(3):
        assert create(gateway, max_output_tokens=50).status_code == 200
    budget = next(e for e in gateway.http().get("/v1/usage").json()["limits"] if e["limit"] == "daily budget")
    assert budget["used"] == 30
    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
        try:
            (budget_key,) = [
                k for k in client.scan_iter("gw:rl:*") if client.type(k) == "hash" and "rt" in client.hkeys(k)
            ]
            held = client.hgetall(f"{budget_key}:a")
            counters = client.hgetall(budget_key)
        finally:
            client.close()
        assert held == {}, f"reservations left behind: {held}"
        assert (counters.get("rt"), counters.get("ru")) == ("0", "0")


def test_a_keys_budget_is_its_own_scope_and_its_tenants_budget_still_binds(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """A key's budget counts that key's spend only (seeded from its own stored usage); its
    tenant's counts every key's; a request must fit both, and a refusal names whose it was."""
    from responses_api.models import ApiKey, Tenant

    usage = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}
    scripted.set_default(MODEL, Reply(text="ok", usage=usage))
    other, _ = make_key(name="other")
    assert create(gateway).status_code == 200  # 40 spent by this key before its budget existed
    assert create(gateway, other).status_code == 200  # 40 by the other key: not this key's
    set_limits(ApiKey, key_id(gateway.key), budget_period="day", budget_tokens=100)
    assert create(gateway).status_code == 200  # seeded with 40 (its own), now 80
    assert create(gateway).status_code == 200  # 80 < 100: the last may cross, now 120
    refused = create(gateway)
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded" and error["message"].startswith("The daily budget of API key 'test'")
    assert create(gateway, other).status_code == 200  # the other key has no budget of its own
    limits = {(e["scope"], e["limit"]): e for e in gateway.http().get("/v1/usage").json()["limits"]}
    assert limits[("API key 'test'", "daily budget")]["used"] == 120
    assert limits[("API key 'test'", "daily budget")]["value"] == 100
    # The tenant's budget counts both keys (40 + 120 + 80 = 240 spent): it refuses the other key too.
    set_limits(Tenant, gateway.tenant_id, budget_period="month", budget_tokens=200)
    refused = create(gateway, other)
    assert refused.status_code == 429 and refused.json()["error"]["message"].startswith(
        "The monthly budget of this tenant"
    )


def test_a_cost_budget_reserves_the_output_cap_at_the_output_price(
    gateway: Gateway, scripted: ScriptedUpstream
) -> None:
    """A request's max_output_tokens was reserved at the input price (it was added to the input
    estimate): at 4x the input price for output, a budget admitted ~4x the output it could pay
    for. Here one running request with a 100-token cap holds ~$0.40 of a $0.50 budget (at the
    input price, ~$0.10), so a second like it, on either endpoint, must wait."""
    from concurrent.futures import ThreadPoolExecutor

    from responses_api.models import ModelRoute, Tenant
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name=MODEL).update(
        input_usd_per_million=Decimal("1000"), output_usd_per_million=Decimal("4000")
    )
    routing.clear_cache()
    set_limits(Tenant, gateway.tenant_id, budget_period="month", budget_usd=Decimal("0.50"))
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    scripted.set_default(MODEL, Reply(text="ok", usage=usage, delay=8.0))  # held while the others ask
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(create, gateway, max_output_tokens=100)
        deadline = time.monotonic() + 30
        while not scripted.model_calls:  # the first is admitted and running upstream
            assert time.monotonic() < deadline and not first.done(), "the first request never reached the upstream"
            time.sleep(0.05)
        second = create(gateway, max_output_tokens=100)
        with gateway.http() as client:
            chat = client.post(
                "/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100},
            )
        assert first.result().status_code == 200
    assert second.status_code == 429 and second.json()["error"]["code"] == "budget_exceeded"
    assert chat.status_code == 429, chat.text


def test_a_budget_settles_anthropics_one_hour_cache_writes_at_their_price(
    anthropic: Gateway,  # noqa: F811 - the fixture
    scripted: ScriptedUpstream,
) -> None:
    """The public usage shows one cache-write total; Anthropic charges its 1-hour writes 2x the
    input price (5-minute ones 1.25x). The live settle prices the 1-hour part as such:
    10 x 10,000 + 20 x 20,000 = 500,000 micro-USD (350,000 at the 5-minute price)."""
    from responses_api.models import ModelRoute, Tenant
    from responses_api.orchestration import routing

    ModelRoute.objects.filter(name=CLAUDE).update(input_usd_per_million=Decimal("10000"))  # 10,000 micro-USD a token
    routing.clear_cache()
    set_limits(Tenant, anthropic.tenant_id, budget_period="month", budget_usd=Decimal("0.45"))
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 20,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 20},
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }
    scripted.set_default("claude-up", Reply(text="ok", usage=usage))

    def one() -> httpx.Response:
        with anthropic.http() as http:
            return http.post("/v1/responses", json={"model": CLAUDE, "input": "hi"})

    assert one().status_code == 200
    refused = one()  # 500,000 of 450,000 spent
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"
