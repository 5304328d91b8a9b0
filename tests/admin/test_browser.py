"""The admin in a real headless Chromium (Debian's `chromium`, driven by Playwright; no browser download).

An operator logs in, reads a stored three-step tool-loop conversation, filters
the response list, creates an API key and sees its secret once; the API docs
render offline; every admin page is visited with realistic data (a tenant with
limits and spend, a chain, a conversation, both kinds of compaction, a cooled-down
route, tools of both executors) and its content checked: numbers, links, columns.
A staff session browses the history API. A screenshot of every page is kept in
$GATEWAY_TEST_ARTIFACTS, or else in pytest's temporary directory; the run prints where.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from django.contrib.staticfiles import finders
from django.utils import timezone

from tests.history.factories import T0, assistant, make_response, tool_loop_conversation, user
from tests.support.harness import make_key

CHROMIUM = Path("/usr/bin/chromium")
WAIT_MS = 90_000


def screenshot(page, path: Path, **options: Any) -> None:
    """A screenshot for review (not a check): animations stopped, so Chromium does not wait on
    them, and the caret hidden, so shots compare between runs."""
    page.screenshot(path=path, timeout=WAIT_MS, animations="disabled", caret="hide", **options)


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "correct-horse-battery-staple"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium package (apt-get install chromium)"
)


def _serve_static(route) -> None:
    """Static files straight from the finders: the live server's whitenoise was set up
    (once per process) before any test could collect them; production runs collectstatic."""
    relative = urlparse(route.request.url).path.removeprefix("/static/")
    found = finders.find(relative)
    if found:
        route.fulfill(path=found)
    else:
        route.fulfill(status=404, body="not found")


@pytest.fixture
def site(transactional_db, gateway_server, settings, monkeypatch) -> dict:
    from django.contrib.auth import get_user_model

    # The live server is plain http on 127.0.0.1: no Secure-only cookies there.
    settings.SESSION_COOKIE_SECURE = False
    settings.CSRF_COOKIE_SECURE = False
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the
    # test makes between browser steps are ordinary synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    get_user_model().objects.create_superuser("ops", "ops@example.com", PASSWORD)
    _, tenant_id = make_key(tenant="acme", name="acme-app")
    make_key(tenant="globex", name="globex-app")
    first, second, third = tool_loop_conversation(tenant_id, model="gpt-house")
    make_response(
        tenant_id,
        model="gpt-small",
        status="failed",
        created_at=T0.replace(hour=9),
        input=[user("Summarise the Q3 report")],
        output=[],
        error={"code": "upstream_error", "message": "The upstream closed the stream"},
    )
    make_response(
        tenant_id,
        model="gpt-small",
        status="incomplete",
        created_at=T0.replace(hour=10),
        input=[user("Write a long poem")],
        incomplete_details={"reason": "max_output_tokens"},
    )
    # two weeks of traffic for the usage chart
    now = timezone.now()
    for day in range(14):
        for k, model in enumerate(("gpt-house", "gpt-small", "llama-local")):
            for n in range(1 + (day + k) % 3):
                make_response(
                    tenant_id,
                    model=model,
                    created_at=now - timedelta(days=day, minutes=n),
                    input_tokens=300 * (k + 1) + 37 * day,
                    output_tokens=120 + 11 * day * (k + 1),
                )
    return {"url": gateway_server.url, "chain": (first, second, third)}


@pytest.fixture
def page(site: dict) -> Iterator:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=site["url"])
        # Waits for what a page must show, and the screenshots kept for review: generous, since
        # they end as soon as the page is there and a loaded machine (load 11-14 on 2 cores)
        # took over 15 s for a full-page screenshot. What is checked does not change.
        context.set_default_timeout(WAIT_MS)
        context.set_default_navigation_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)  # its own default is 5 s
        tab = context.new_page()
        tab.route("**/static/**", _serve_static)
        try:
            yield tab
        finally:
            context.close()
            browser.close()


def _login(page) -> None:
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("text=Site administration")


def test_operator_reads_a_tool_loop_conversation(page, site: dict, artifacts: Path) -> None:
    from playwright.sync_api import expect

    _first, second, third = site["chain"]
    _login(page)
    page.click("a[href='/admin/responses_api/response/']")
    expect(page.locator("#result_list tbody tr")).to_have_count(50)  # one full page
    screenshot(page, artifacts / "admin-responses.png", full_page=True)

    page.fill("#searchbar", third.id)
    page.press("#searchbar", "Enter")
    page.locator(f'tr:has(code[title="{third.id}"]) a.gw-link').click()
    expect(page.locator("h1")).to_contain_text("Conversation up to")
    thread = page.locator("#content-main")
    for text in (
        "What's the weather in Paris, and should I pack an umbrella?",
        "You are a travel assistant",
        "light rain",
        "showers",
        "It's 14 °C with light rain in Paris, and showers are expected tomorrow",
    ):
        expect(thread.get_by_text(text, exact=False).first).to_be_visible()
    calls = page.locator("[data-item-type=function_call]")
    expect(calls).to_have_count(2)
    expect(calls.nth(0)).to_contain_text("get_weather")
    expect(calls.nth(0)).to_contain_text('"city": "Paris"')
    expect(calls.nth(1)).to_contain_text("get_forecast")
    outputs = page.locator("[data-item-type=function_call_output]")
    expect(outputs).to_have_count(2)
    expect(outputs.nth(0)).to_contain_text("get_weather")  # the result names its tool
    expect(outputs.nth(1)).to_contain_text('"tomorrow": "showers"')
    expect(page.locator("[data-role=user]")).to_have_count(1)
    expect(page.locator(".gw-assistant")).to_have_count(1)
    expect(page.locator("section.gw-turn")).to_have_count(3)
    # reasoning is folded until asked for
    reasoning = page.locator("details.gw-reasoning").first
    hidden = reasoning.get_by_text("call get_weather for Paris first")
    expect(hidden).to_be_hidden()
    screenshot(page, artifacts / "admin-conversation.png", full_page=True)
    reasoning.locator("summary").click()
    expect(hidden).to_be_visible()

    # from the conversation to the response page and along the chain
    page.locator(f'section[data-response-id="{second.id}"] .gw-turn-head a').first.click()
    expect(page.locator("[data-nav=previous]")).to_be_visible()
    page.click("[data-nav=next]")
    expect(page.locator("#content")).to_contain_text(third.id)
    screenshot(page, artifacts / "admin-response-detail.png", full_page=True)


def test_operator_filters_and_sees_failures(page, site: dict, artifacts: Path) -> None:
    from playwright.sync_api import expect

    _login(page)
    page.goto("/admin/responses_api/response/")
    page.locator("#changelist-filter a", has_text=re.compile(r"^Failed$")).click()
    expect(page).to_have_url(re.compile(r"status__exact=failed"))
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".gw-badge")).to_have_text("failed")
    screenshot(page, artifacts / "admin-filter-failed.png", full_page=True)
    rows.first.locator("a.gw-link").click()
    expect(page.locator("[data-role=response-error]")).to_contain_text("The upstream closed the stream")

    page.goto("/admin/responses_api/response/usage/")
    expect(page.locator("svg rect.gw-bar").first).to_be_attached()
    screenshot(page, artifacts / "admin-usage.png", full_page=True)


def test_operator_creates_an_api_key_and_sees_the_secret_once(page, site: dict, artifacts: Path) -> None:
    from playwright.sync_api import expect

    _login(page)
    page.goto("/admin/responses_api/apikey/add/")
    page.select_option("#id_tenant", label="acme")
    page.fill("#id_name", "browser-made")
    page.click("input[name=_save]")
    box = page.locator("#gw-new-secret")
    expect(box).to_be_visible()
    secret = page.locator("#gw-secret-value").inner_text().strip()
    assert secret.startswith("sk-gw-")
    screenshot(page, artifacts / "admin-apikey-created.png", full_page=True)

    # the key works against the API
    models = httpx.get(f"{site['url']}/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    assert models.status_code == 200

    page.reload()
    expect(page.locator("#gw-new-secret")).to_have_count(0)
    assert secret not in page.content()
    page.goto("/admin/responses_api/apikey/")
    assert secret not in page.content()
    expect(page.locator("#result_list")).to_contain_text("browser-made")

    # Regenerate: the same key with a new secret, shown once; the old secret is refused.
    page.locator("#result_list a", has_text="browser-made").click()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#gw-regenerate")
    expect(page.locator("#gw-new-secret")).to_be_visible()
    renewed = page.locator("#gw-secret-value").inner_text().strip()
    assert renewed.startswith("sk-gw-") and renewed != secret
    page.screenshot(path=artifacts / "admin-apikey-regenerated.png", full_page=True)
    for key, status in ((secret, 401), (renewed, 200)):
        models = httpx.get(f"{site['url']}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert models.status_code == status, (status, models.text)


def test_api_docs_render_offline(page, site: dict, artifacts: Path) -> None:
    from playwright.sync_api import expect

    outside: list[str] = []
    page.on(
        "request", lambda r: outside.append(r.url) if not r.url.startswith((site["url"], "data:", "blob:")) else None
    )
    page.goto("/v1/docs")
    expect(page.locator("h2", has_text="List stored responses")).to_be_visible()
    expect(page.locator("h2", has_text="Create a response")).to_be_visible()
    screenshot(page, artifacts / "api-docs.png")
    assert outside == []


@pytest.fixture
def daily(site: dict) -> dict:
    """What an operator meets on a working day, beside the site's chain and two weeks of traffic:
    acme with limits, a budget and spend this month at its route's prices; a cooled-down
    target; a conversation; a compaction of each kind; tools of both executors and their log."""
    import asyncio

    from responses_api.conversations.services import conversation_create
    from responses_api.models import ApiKey, ModelRoute, Provider, Response, RouteTarget, Tenant
    from responses_api.protocol.compaction import COMPACTION_INSTRUCTIONS
    from responses_api.store.router_health import health_store
    from tool_registry.models import EgressAllow, McpServer, Tool, ToolCallRecord

    acme = Tenant.objects.get(name="acme")
    Tenant.objects.filter(pk=acme.pk).update(
        requests_per_minute=120, tokens_per_minute=50_000, budget_tokens=2_000_000, budget_usd=25
    )
    key = ApiKey.objects.get(name="acme-app")
    ApiKey.objects.filter(pk=key.pk).update(requests_per_minute=60)
    house = Provider.objects.create(name="house", base_url="http://127.0.0.1:9/v1")
    backup = Provider.objects.create(name="backup", base_url="http://127.0.0.1:9/v1")
    route = ModelRoute.objects.create(
        name="gpt-house", description="the house model", input_usd_per_million=2, output_usd_per_million=8
    )
    RouteTarget.objects.create(route=route, provider=house, upstream_model="house-v2", weight=1)
    RouteTarget.objects.create(route=route, provider=backup, upstream_model="backup-v1", weight=0)
    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API may hold this thread's event loop
        cooling = health_store().failed("house:house-v2", "HTTP 503 from upstream", cool_for=600)
        thread.submit(asyncio.run, cooling).result()
    # the last minute: three calls of the key
    now = timezone.now()
    recent = [
        make_response(acme.pk, model="gpt-house", created_at=now - timedelta(seconds=5 + i), input_tokens=1000)
        for i in range(3)
    ]
    Response.objects.filter(pk__in=[r.pk for r in recent]).update(api_key=key)
    conversation = conversation_create(
        tenant_id=acme.pk,
        items=[user("Plan a week in Lisbon"), assistant("Day 1: Alfama and the castle.")],
        metadata={"channel": "web", "customer": "c-1042"},
    )
    compact = make_response(
        acme.pk,
        model="gpt-house",
        created_at=now - timedelta(minutes=30),
        instructions=f"Be terse.\n\n{COMPACTION_INSTRUCTIONS}",
        input=[user("Summarize the conversation above as instructed, for continuing it later.")],
        output=[assistant("The user plans a week in Lisbon.")],
    )
    trigger = make_response(
        acme.pk,
        model="gpt-house",
        created_at=now - timedelta(minutes=20),
        instructions="You are a coding agent.",
        input=[user("fix the failing test")],
        output=[{"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAAA-sealed"}],
    )
    http_tool = Tool.objects.create(
        name="get_weather", description="Weather by city", url="https://tools.example.com/weather"
    )
    Tool.objects.create(
        name="add_numbers",
        description="Adds two numbers",
        executor=Tool.Executor.PYTHON,
        python_callable="tests.tools.add_numbers",
    )
    McpServer.objects.create(label="docs", url="https://mcp.example.com/mcp", description="Product docs")
    EgressAllow.objects.create(entry="tools.example.com", note="the weather webhook")
    ToolCallRecord.objects.create(
        response_id=recent[0].id,
        call_id="call_1",
        tool_name="get_weather",
        arguments='{"city": "Paris"}',
        output="14 C",
    )
    return {
        "acme": Tenant.objects.get(pk=acme.pk),
        "key": key,
        "route": route,
        "conversation": conversation,
        "compact": compact,
        "trigger": trigger,
        "http_tool": http_tool,
    }


def _shot(page, artifacts: Path, name: str) -> None:
    screenshot(page, artifacts / f"{name}.png", full_page=True)


def _open(page, url: str) -> None:
    """Go to an admin page; it must answer 200 (a failure shows what it answered)."""
    reply = page.goto(url)
    assert reply is not None and reply.status == 200, (
        f"{url}: {reply and reply.status}: {reply and reply.text()[:3000]}"
    )


def _open_showing(page, url: str, selector: str) -> None:
    """`_open`, then wait for `selector`. CI once waited 60 s for an element this page renders
    from a row the test had just committed, and printed nothing else: if it is missing, say what
    the browser shows (its address, title and text) and open the page once more, so that a page
    the browser failed to render is told apart from a page the server rendered without it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    _open(page, url)
    try:
        page.locator(selector).first.wait_for(state="attached", timeout=WAIT_MS / 3)
        return
    except PlaywrightTimeout:
        first = _what_the_page_shows(page)
    print(f"{selector} not on {url} after {WAIT_MS / 3000:.0f} s; opening it again. The page: {first}")
    _open(page, url)
    try:
        page.locator(selector).first.wait_for(state="attached", timeout=WAIT_MS / 3)
    except PlaywrightTimeout:
        raise AssertionError(
            f"{selector} not on {url}, twice.\nFirst: {first}\nThen: {_what_the_page_shows(page)}"
        ) from None


def _what_the_page_shows(page) -> str:
    try:
        text = page.locator("body").inner_text(timeout=10_000)
    except Exception as exc:  # noqa: BLE001 - a diagnostic: whatever the browser says is the finding
        text = f"<no text: {exc!r:.300}>"
    return f"url={page.url} title={page.title()!r} text={text[:3000]!r}"


def _fits(page) -> bool:
    """Whether a changelist's table fits its box (an overflowing one clips its last columns)."""
    box = page.evaluate(
        "() => { const r = document.querySelector('#changelist .results'); return [r.scrollWidth, r.clientWidth]; }"
    )
    print("changelist width (content, box):", box)
    return bool(box[0] <= box[1] + 2)  # a pixel or two of borders and rounding clip nothing


def _column(page, title: str):
    """A changelist column's header cell, by its title."""
    return page.locator("#result_list thead th", has_text=re.compile(rf"^\s*{re.escape(title)}\s*$"))


def test_every_admin_page_shows_what_an_operator_needs(page, site: dict, daily: dict, artifacts: Path) -> None:
    from playwright.sync_api import expect

    from responses_api.history.selectors import tenants_use

    acme = daily["acme"]
    _login(page)

    # the front page links the daily pages
    daily_links = page.locator("[data-role=daily-links]")
    for name, href in (
        ("Usage and cost", "/admin/responses_api/response/usage/"),
        ("Route health", "/admin/responses_api/modelroute/"),
        ("API docs", "/v1/docs"),
        ("History API", "/v1/responses"),
        ("Compactions", "/admin/responses_api/response/?kind=compaction"),
    ):
        expect(daily_links.get_by_role("link", name=name)).to_have_attribute("href", href)
    _shot(page, artifacts, "01-admin-index")

    # tenants: limits, this period's spend at the route's prices, the last minute
    _open(page, "/admin/responses_api/tenant/")
    for title in ("Limits and budget", "Spent this period", "Last minute"):
        expect(_column(page, title)).to_be_visible()
    use = tenants_use([acme])[acme.pk]
    # the key's three calls and the site's traffic of this minute
    assert use.period_tokens > 0 and use.period_micro_usd > 0 and use.minute_requests >= 3
    row = page.locator("#result_list tbody tr", has_text="acme")
    expect(row).to_contain_text("120 rpm · 50,000 tpm · 2,000,000 tokens a month · $25.00 a month")
    expect(row).to_contain_text(f"{use.period_tokens:,} tokens (${use.period_micro_usd / 1_000_000:,.2f}) this month")
    expect(row).to_contain_text(f"{100 * use.period_tokens / 2_000_000:.0f}% of the token budget")
    expect(row).to_contain_text(f"{use.minute_requests} requests, {use.minute_tokens:,} tokens")
    expect(page.locator("#result_list tbody tr", has_text="globex")).to_contain_text("none")
    _shot(page, artifacts, "02-tenants")
    assert _fits(page)

    # a tenant: the budget counted from the store before any request counted it
    _open(page, f"/admin/responses_api/tenant/{acme.pk}/change/")
    table = page.locator("[data-role=use-table]")
    expect(table).to_contain_text("monthly budget")
    expect(table).not_to_contain_text("not counted yet")
    expect(table.locator("tr", has_text="monthly budget")).to_contain_text(f"{use.period_tokens:,}")
    expect(table.locator("tr", has_text="requests per minute")).to_contain_text(
        f"{use.minute_requests} in the last 60 s"
    )
    _shot(page, artifacts, "03-tenant")

    # keys: limits in the list; a key's requests per minute as the window saw them
    _open(page, "/admin/responses_api/apikey/")
    expect(_column(page, "Limits")).to_be_visible()
    expect(page.locator("#result_list tbody tr", has_text="acme-app")).to_contain_text("60 rpm")
    _shot(page, artifacts, "04-apikeys")
    assert _fits(page)
    _open(page, f"/admin/responses_api/apikey/{daily['key'].pk}/change/")
    expect(page.locator("[data-role=use-table] tr", has_text="requests per minute")).to_contain_text(
        "3 in the last 60 s"
    )
    _shot(page, artifacts, "05-apikey")

    # providers
    _open(page, "/admin/responses_api/provider/")
    expect(page.locator("#result_list tbody tr", has_text="house")).to_contain_text("http://127.0.0.1:9/v1")
    _shot(page, artifacts, "06-providers")
    page.locator("#result_list a", has_text=re.compile(r"^house$")).click()
    expect(page.locator("#id_base_url")).to_have_value("http://127.0.0.1:9/v1")
    _shot(page, artifacts, "07-provider")

    # routes: the health column shows the cooled-down target and the healthy fallback
    _open(page, "/admin/responses_api/modelroute/")
    expect(_column(page, "Health")).to_be_visible()
    row = page.locator("#result_list tbody tr", has_text="gpt-house")
    expect(row.locator('[data-target="house:house-v2"] .gw-bad')).to_contain_text(re.compile(r"cooling \d+ s"))
    expect(row.locator('[data-target="backup:backup-v1"] .gw-ok')).to_have_text("healthy")
    _shot(page, artifacts, "08-routes")
    assert _fits(page)
    _open(page, f"/admin/responses_api/modelroute/{daily['route'].pk}/change/")
    expect(page.locator(".field-health", has_text="cooling down")).to_contain_text("HTTP 503 from upstream")
    _shot(page, artifacts, "09-route")

    # responses: the kind column and filter find both compactions
    _open(page, "/admin/responses_api/response/?kind=compaction")
    expect(_column(page, "Kind")).to_be_visible()
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator(f'tr:has(code[title="{daily["compact"].id}"]) [data-kind=compact]')).to_be_visible()
    expect(page.locator(f'tr:has(code[title="{daily["trigger"].id}"]) [data-kind=compaction]')).to_be_visible()
    _shot(page, artifacts, "10-responses-compactions")
    _open(page, "/admin/responses_api/response/?kind=response")
    expect(page.locator("#result_list [data-kind]")).to_have_count(0)

    # a /compact run: the client's instructions, never the gateway's summariser prompt
    _open(page, f"/admin/responses_api/response/{daily['compact'].id}/change/")
    page.locator("details summary", has_text="Request").click()  # the folded "Request" fieldset
    instructions = page.locator(".field-instructions_display")
    expect(instructions).to_contain_text("Be terse.")
    expect(instructions.locator("[data-role=gateway-prompt]")).to_be_visible()
    assert "You are compacting a long conversation" not in page.content()
    _shot(page, artifacts, "11-response-compact")
    _open(page, f"/admin/responses_api/response/{daily['compact'].id}/conversation/")
    expect(page.locator("#content-main [data-kind=compact]")).to_be_visible()
    assert "You are compacting a long conversation" not in page.content()
    _shot(page, artifacts, "12-conversation-compact")

    # the chain's conversation page and the usage chart
    *_, head = site["chain"]
    _open(page, f"/admin/responses_api/response/{head.id}/conversation/")
    expect(page.locator("section.gw-turn")).to_have_count(3)
    expect(page.locator("#content-main")).to_contain_text("You are a travel assistant")
    _shot(page, artifacts, "13-chain")
    _open(page, "/admin/responses_api/response/usage/")
    expect(page.locator("svg rect.gw-bar").first).to_be_attached()
    expect(page.locator("#content-main")).to_contain_text("gpt-house")
    _shot(page, artifacts, "14-usage")

    # conversations: every column inside a 1400 px window; a conversation's items
    page.set_viewport_size({"width": 1400, "height": 900})
    _open(page, "/admin/responses_api/conversation/")
    expect(_column(page, "Created at")).to_be_visible()
    # nothing clipped: the table fits its box, and the date cell shows its whole text
    _shot(page, artifacts, "15-conversations")
    assert _fits(page)
    created = page.locator("#result_list td.field-created span")
    assert created.evaluate("e => e.scrollWidth <= e.parentElement.clientWidth")
    row = page.locator(f'#result_list tbody tr:has(code[title="{daily["conversation"].id}"])')
    expect(row).to_contain_text("acme")
    _shot(page, artifacts, "15-conversations")
    page.set_viewport_size({"width": 1440, "height": 900})
    row.locator("a").first.click()
    expect(page.locator("#content-main")).to_contain_text("Plan a week in Lisbon")
    expect(page.locator("#content-main")).to_contain_text("c-1042")
    _shot(page, artifacts, "16-conversation")

    # tools: the form shows the chosen executor's fields only
    _open(page, "/admin/tool_registry/tool/")
    expect(page.locator("#result_list tbody tr", has_text="get_weather")).to_contain_text(
        "https://tools.example.com/weather"
    )
    expect(page.locator("#result_list tbody tr", has_text="add_numbers")).to_contain_text("tests.tools.add_numbers")
    _shot(page, artifacts, "17-tools")
    _open(page, "/admin/tool_registry/tool/add/")
    expect(page.locator("#id_url")).to_be_visible()
    expect(page.locator("#id_python_callable")).to_be_hidden()
    page.select_option("#id_executor", "python")
    expect(page.locator("#id_python_callable")).to_be_visible()
    expect(page.locator("#id_url")).to_be_hidden()
    expect(page.locator("#id_signing_secret_env")).to_be_hidden()
    _shot(page, artifacts, "18-tool-add-python")
    _open(page, f"/admin/tool_registry/tool/{daily['http_tool'].pk}/change/")
    expect(page.locator("#id_url")).to_have_value("https://tools.example.com/weather")
    expect(page.locator("#id_python_callable")).to_be_hidden()
    _shot(page, artifacts, "19-tool-http")
    _open(page, f"/admin/tool_registry/tool/{daily['http_tool'].pk}/test/")
    expect(page.locator("h1")).to_contain_text("Test call: get_weather")
    expect(page.locator("#id_arguments")).to_be_visible()
    _shot(page, artifacts, "20-tool-test-call")

    # the rest of the registry, and the users
    for url, text, name in (
        ("/admin/tool_registry/mcpserver/", "https://mcp.example.com/mcp", "21-mcp-servers"),
        ("/admin/tool_registry/egressallow/", "the weather webhook", "22-egress"),
        ("/admin/tool_registry/toolcallrecord/", "call_1", "23-tool-calls"),
        ("/admin/auth/user/", "ops@example.com", "24-users"),
        ("/admin/auth/group/", "0 groups", "25-groups"),
    ):
        _open(page, url)
        expect(page.locator("#content-main")).to_contain_text(text)
        _shot(page, artifacts, name)

    # the history API, browsed with this login: every tenant, read-only
    _open(page, "/v1/responses?limit=100")
    expect(page.locator("[data-role=staff-user]")).to_have_text("staff session: ops")
    expect(page.locator(".response-info")).to_contain_text(daily["trigger"].id)
    expect(page.locator("form[method=POST]")).to_have_count(0)
    _shot(page, artifacts, "26-history-api")


def test_the_landing_page_links_the_way_in(page, site: dict, artifacts: Path) -> None:
    from playwright.sync_api import expect

    reply = page.goto("/")
    assert reply is not None and reply.status == 200
    links = page.locator("[data-role=landing-links]")
    for name, href in (("Admin", "/admin/"), ("API docs", "/v1/docs"), ("Health", "/readyz")):
        expect(links.get_by_role("link", name=re.compile(f"^{name}"))).to_have_attribute("href", href)
    expect(page.locator("pre")).to_contain_text(f"{site['url']}/v1/responses")
    _shot(page, artifacts, "00-landing")
    page.get_by_role("link", name=re.compile("^Health")).click()
    expect(page.locator("body")).to_contain_text("ok")


def _usage_api(page, **params: str) -> dict:
    """/v1/usage read with the page's staff session (every tenant), as the admin's CSV links do."""
    reply = page.request.get("/v1/usage", params=params, timeout=60_000)
    assert reply.status == 200, reply.text()[:2000]
    return reply.json()


def test_who_spent_what_at_a_glance(page, site: dict, daily: dict, artifacts: Path) -> None:
    """Issue 52: cost on the index, the usage page, the responses list and the key and tenant
    pages, each the figure /v1/usage gives for the same period; lists whole at 1,400 px."""
    from playwright.sync_api import expect

    from responses_api.store.selectors import usd_text as money

    page.set_default_timeout(60_000)  # a loaded machine renders slowly; nothing here is timed
    _login(page)
    now = timezone.now()
    today = int(now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp())
    month = int(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp())

    # the index: today's requests, errors, tokens and cost, the top keys and models
    expect(page.locator("#site-name")).to_contain_text("Open Responses gateway")
    assert "Django administration" not in page.content()
    day = _usage_api(page, start=str(today), group_by="model")["total"]
    expect(page.locator("[data-role=today-requests]")).to_have_text(f"{day['requests']:,}")
    expect(page.locator("[data-role=today-tokens]")).to_have_text(f"{day['total_tokens']:,}")
    expect(page.locator("[data-role=today-cost]")).to_have_text(money(day["cost_usd"]))
    assert day["cost_usd"] > 0  # gpt-house is priced
    expect(page.locator("[data-role=today-top-models]")).to_contain_text("gpt-house")
    expect(page.locator("[data-role=today-top-keys]")).to_contain_text("acme-app")
    _shot(page, artifacts, "30-index-today")

    # the usage page: the period's cost, per model and per key, as /v1/usage says
    _open(page, "/admin/responses_api/response/usage/?days=30&metric=cost")
    start = int((now - timedelta(days=29)).replace(hour=0, minute=0, second=0, microsecond=0).timestamp())
    period = _usage_api(page, start=str(start), group_by="model")
    expect(page.locator("#gw-period-cost .gw-kpi-value")).to_have_text(money(period["total"]["cost_usd"]))
    house = next(b for b in period["data"] if b["model"] == "gpt-house")
    expect(page.locator("#gw-by-model tr", has_text="gpt-house")).to_contain_text(money(house["cost_usd"]))
    by_key = _usage_api(page, start=str(start), group_by="key")["data"]
    app = next(b for b in by_key if b["key"] and b["key"].startswith("acme-app"))
    expect(page.locator("#gw-by-key tr", has_text="acme-app")).to_contain_text(money(app["cost_usd"]))
    expect(page.locator("svg[aria-label='Cost (USD) per day per model'] rect.gw-bar").first).to_be_attached()
    csv = page.request.get(page.locator("a", has_text="per key and model").get_attribute("href"), timeout=60_000)
    assert csv.status == 200 and csv.text().startswith("model,tenant,key_id,key,")
    assert "acme-app" in csv.text() and csv.headers["content-type"].startswith("text/csv")
    _shot(page, artifacts, "31-usage-cost")

    # 1,400 px: the responses and keys lists show every column, cost and key included
    page.set_viewport_size({"width": 1400, "height": 900})
    _open(page, "/admin/responses_api/response/")
    for title in ("Key", "Cost"):
        expect(_column(page, title)).to_be_visible()
    recent = page.locator("#result_list tbody tr", has_text="acme-app").first
    expect(recent).to_contain_text("$0.002")  # 1,000 input and 5 output tokens of gpt-house at $2 and $8
    _shot(page, artifacts, "32-responses-cost")
    assert _fits(page)
    _open(page, "/admin/responses_api/apikey/")
    month_by_key = _usage_api(page, start=str(month), group_by="key")["data"]
    spent = next(b for b in month_by_key if b["key"] and b["key"].startswith("acme-app"))
    expect(page.locator("#result_list tbody tr", has_text="acme-app")).to_contain_text(money(spent["cost_usd"]))
    _shot(page, artifacts, "33-apikeys-cost")
    assert _fits(page)
    page.set_viewport_size({"width": 1440, "height": 900})

    # the key and tenant pages: this month's cost, as /v1/usage gives it
    _open(page, f"/admin/responses_api/apikey/{daily['key'].pk}/change/")
    expect(page.locator("[data-role=cost-table] [data-role=cost-total]")).to_have_text(money(spent["cost_usd"]))
    _shot(page, artifacts, "34-apikey-cost")
    _open(page, f"/admin/responses_api/tenant/{daily['acme'].pk}/change/")
    acme = next(b for b in _usage_api(page, start=str(month), group_by="tenant")["data"] if b["tenant"] == "acme")
    for table in page.locator("[data-role=cost-table] [data-role=cost-total]").all():
        expect(table).to_have_text(money(acme["cost_usd"]))
    _shot(page, artifacts, "35-tenant-cost")

    # a response made in a conversation links to it; the conversation names each item's response
    # and its responses' tokens and cost
    from responses_api.models import Response

    made = Response.objects.filter(api_key=daily["key"]).order_by("created_at").first()
    assert made is not None
    assert Response.objects.filter(pk=made.pk).update(conversation=daily["conversation"]) == 1
    _open_showing(page, f"/admin/responses_api/response/{made.pk}/change/", "[data-role=conversation-link]")
    page.locator("[data-role=conversation-link]").click()
    usage = page.locator("[data-role=conversation-usage]")
    expect(usage).to_contain_text(f"1 response, {(made.input_tokens or 0) + (made.output_tokens or 0):,} tokens")
    expect(page.locator("#content-main th", has_text="Response")).to_be_visible()
    _shot(page, artifacts, "36-conversation-usage")

    # tools: a config-managed HTTP tool shows no Python section; the Python one names the allowlist
    from tool_registry.models import Tool

    Tool.objects.filter(pk=daily["http_tool"].pk).update(config_managed=["executor"])
    _open(page, f"/admin/tool_registry/tool/{daily['http_tool'].pk}/change/")
    expect(page.locator("fieldset.gw-executor-http")).to_be_visible()
    expect(page.locator("fieldset.gw-executor-python")).to_have_count(0)
    _shot(page, artifacts, "37-tool-http-managed")
    _open(page, "/admin/tool_registry/tool/add/")
    page.select_option("#id_executor", "python")
    expect(page.locator("[data-role=python-allowlist]")).to_be_visible()
    expect(page.locator("[data-role=python-allowlist]")).to_contain_text("GATEWAY_PYTHON_TOOL_MODULES")
    _shot(page, artifacts, "38-tool-python-allowlist")
