"""The admin in a real headless Chromium (Debian's `chromium`, driven by Playwright; no browser download).

An operator logs in, reads a stored three-step tool-loop conversation, filters
the response list, creates an API key and sees its secret once; the API docs
render offline. Screenshots land in test-artifacts/ (gitignored).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from django.contrib.staticfiles import finders
from django.utils import timezone

from tests.history.factories import T0, make_response, tool_loop_conversation, user
from tests.support.harness import make_key

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PASSWORD = "correct-horse-battery-staple"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium package (apt-get install chromium)"
)


def _serve_static(route) -> None:  # type: ignore[no-untyped-def]
    """Static files straight from the finders: the live server's whitenoise was set up
    (once per process) before any test could collect them; production runs collectstatic."""
    relative = urlparse(route.request.url).path.removeprefix("/static/")
    found = finders.find(relative)
    if found:
        route.fulfill(path=found)
    else:
        route.fulfill(status=404, body="not found")


@pytest.fixture
def site(transactional_db, gateway_server, settings, monkeypatch) -> dict:  # type: ignore[no-untyped-def]
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
def page(site: dict) -> Iterator:  # type: ignore[type-arg]
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=site["url"])
        context.set_default_timeout(15_000)
        tab = context.new_page()
        tab.route("**/static/**", _serve_static)
        try:
            yield tab
        finally:
            context.close()
            browser.close()


def _login(page) -> None:  # type: ignore[no-untyped-def]
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("text=Site administration")


def test_operator_reads_a_tool_loop_conversation(page, site: dict) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    _first, second, third = site["chain"]
    _login(page)
    page.click("a[href='/admin/responses_api/response/']")
    expect(page.locator("#result_list tbody tr")).to_have_count(50)  # one full page
    page.screenshot(path=ARTIFACTS / "admin-responses.png", full_page=True)

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
    page.screenshot(path=ARTIFACTS / "admin-conversation.png", full_page=True)
    reasoning.locator("summary").click()
    expect(hidden).to_be_visible()

    # from the conversation to the response page and along the chain
    page.locator(f'section[data-response-id="{second.id}"] .gw-turn-head a').first.click()
    expect(page.locator("[data-nav=previous]")).to_be_visible()
    page.click("[data-nav=next]")
    expect(page.locator("#content")).to_contain_text(third.id)
    page.screenshot(path=ARTIFACTS / "admin-response-detail.png", full_page=True)


def test_operator_filters_and_sees_failures(page, site: dict) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    _login(page)
    page.goto("/admin/responses_api/response/")
    page.locator("#changelist-filter a", has_text=re.compile(r"^Failed$")).click()
    expect(page).to_have_url(re.compile(r"status__exact=failed"))
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".gw-badge")).to_have_text("failed")
    page.screenshot(path=ARTIFACTS / "admin-filter-failed.png", full_page=True)
    rows.first.locator("a.gw-link").click()
    expect(page.locator("[data-role=response-error]")).to_contain_text("The upstream closed the stream")

    page.goto("/admin/responses_api/response/usage/")
    expect(page.locator("svg rect.gw-bar").first).to_be_attached()
    page.screenshot(path=ARTIFACTS / "admin-usage.png", full_page=True)


def test_operator_creates_an_api_key_and_sees_the_secret_once(page, site: dict) -> None:  # type: ignore[no-untyped-def]
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
    page.screenshot(path=ARTIFACTS / "admin-apikey-created.png", full_page=True)

    # the key works against the API
    models = httpx.get(f"{site['url']}/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    assert models.status_code == 200

    page.reload()
    expect(page.locator("#gw-new-secret")).to_have_count(0)
    assert secret not in page.content()
    page.goto("/admin/responses_api/apikey/")
    assert secret not in page.content()
    expect(page.locator("#result_list")).to_contain_text("browser-made")


def test_api_docs_render_offline(page, site: dict) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    outside: list[str] = []
    page.on(
        "request", lambda r: outside.append(r.url) if not r.url.startswith((site["url"], "data:", "blob:")) else None
    )
    page.goto("/v1/docs")
    expect(page.locator("h2", has_text="List stored responses")).to_be_visible(timeout=30_000)
    expect(page.locator("h2", has_text="Create a response")).to_be_visible()
    page.screenshot(path=ARTIFACTS / "api-docs.png")
    assert outside == []
