"""Who spent what, in the admin: cost per day and model (the usage page, with a key split), per
response (with its key), per key and per tenant; every figure the same as /v1/usage's."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone

from responses_api.history.selectors import usage_summary, usage_total
from responses_api.models import ApiKey, ModelRoute, Tenant
from responses_api.store.selectors import usd_text
from tests.history.factories import make_response
from tests.support.harness import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


@pytest.fixture
def spend() -> dict:
    """Two keys of one tenant on two priced models, with cache reads and writes, this month."""
    make_key(tenant="acme", name="web")
    make_key(tenant="acme", name="batch")
    web, batch = ApiKey.objects.get(name="web"), ApiKey.objects.get(name="batch")
    ModelRoute.objects.create(name="claude", input_usd_per_million=Decimal(3), output_usd_per_million=Decimal(15))
    ModelRoute.objects.create(name="gpt", input_usd_per_million=Decimal(2), output_usd_per_million=Decimal(8))
    day = timezone.now()
    claude = make_response(
        web.tenant_id,
        model="claude",
        created_at=day,
        input_tokens=1_000_000,
        output_tokens=10_000,
        cached_tokens=100_000,
        cache_write_tokens=300_000,
        cache_write_1h_tokens=100_000,
        api_key_id=web.pk,
    )
    make_response(
        batch.tenant_id, model="gpt", created_at=day, input_tokens=500_000, output_tokens=1000, api_key_id=batch.pk
    )
    return {"web": web, "batch": batch, "claude": claude, "tenant": Tenant.objects.get(name="acme")}


def test_usage_page_charts_cost_per_day_and_splits_it_by_key(admin_client, spend: dict) -> None:
    url = reverse("admin:responses_api_response_usage")
    body = admin_client.get(url).content.decode()
    # claude: 0.6M x 3 + 0.1M x 3 + 0.2M x 3.75 + 0.1M x 6 + 0.01M x 15 = $3.60; gpt: 1 + 0.008 = $1.01
    assert 'id="gw-period-cost"' in body and "$4.61" in body
    assert "$3.60" in body and "$1.01" in body
    assert 'id="gw-by-key"' in body and f"web ({spend['web'].prefix}…)" in body
    assert "/v1/usage?" in body and "format=csv" in body
    cost = admin_client.get(url, {"metric": "cost"}).content.decode()
    assert "Cost (USD) per day per model" in cost and cost.count('class="gw-bar"') == 2
    assert "$4.61" in cost  # the legend and the axis speak dollars


def test_responses_list_shows_the_key_and_the_cost(admin_client, spend: dict) -> None:
    body = admin_client.get(reverse("admin:responses_api_response_changelist")).content.decode()
    assert ">web<" in body and ">batch<" in body
    assert "$3.60" in body and "$1.01" in body
    detail = admin_client.get(
        reverse("admin:responses_api_response_change", args=[quote(spend["claude"].id)])
    ).content.decode()
    assert "300,000 cache writes" in detail and '<strong data-role="cost">$3.60</strong>' in detail


def test_key_and_tenant_pages_show_this_months_cost(admin_client, spend: dict) -> None:
    web, tenant = spend["web"], spend["tenant"]
    keys = admin_client.get(reverse("admin:responses_api_apikey_changelist")).content.decode()
    assert "Cost this month" in keys and "$3.60" in keys and "$1.01" in keys
    page = admin_client.get(reverse("admin:responses_api_apikey_change", args=[web.pk])).content.decode()
    table = page[page.index('data-role="cost-table"') :]
    table = table[: table.index("</table>")]
    assert "claude" in table and "$3.60" in table and "gpt" not in table  # the key's own calls only
    # The key's spend is shown once: one table, whose today and month totals are /v1/usage's.
    assert page.count('data-role="cost-table"') == 1 and 'data-role="key-spend"' not in page
    midnight = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    month = midnight.replace(day=1)
    for role, start in (("today", midnight), ("total", month)):
        spent = usage_total(usage_summary(tenant_id=web.tenant_id, group_by=("model",), start=start, key_id=web.pk))
        assert f'<td data-role="cost-{role}">{usd_text(spent["cost_usd"])}</td>' in table, role
    page = admin_client.get(reverse("admin:responses_api_tenant_change", args=[tenant.pk])).content.decode()
    assert 'data-by="key"' in page and 'data-by="model"' in page
    total = usage_total(usage_summary(tenant_id=tenant.pk, group_by=("model",), start=month))
    assert total["cost_usd"] == 4.608
    assert '<td data-role="cost-total">$4.61</td>' in page


def test_the_index_shows_todays_requests_errors_tokens_and_cost_with_the_top_keys_and_models(
    admin_client,
    spend: dict,
) -> None:
    make_response(
        spend["web"].tenant_id,
        model="gpt",
        status="failed",
        input_tokens=None,
        output_tokens=None,
        created_at=timezone.now(),
    )
    make_response(spend["web"].tenant_id, model="gpt", created_at=timezone.now() - timedelta(days=2))  # not today
    body = admin_client.get(reverse("admin:index")).content.decode()
    assert "Django administration" not in body and "Open Responses gateway" in body
    assert '<td class="gw-num" data-role="today-requests">3</td>' in body  # the failed one counts, the old one not
    assert '<td class="gw-num" data-role="today-errors">1</td>' in body
    assert '<td class="gw-num" data-role="today-tokens">1,511,000</td>' in body
    assert '<td class="gw-num" data-role="today-cost">$4.61</td>' in body
    keys = body[body.index('data-role="today-top-keys"') :]
    assert keys.index(f"web ({spend['web'].prefix}…)") < keys.index(f"batch ({spend['batch'].prefix}…)")
    models = body[body.index('data-role="today-top-models"') :]
    assert models.index(">claude<") < models.index(">gpt<")
    assert '<td class="gw-num">1,010,000</td><td class="gw-num">$3.60</td>' in keys


def test_one_cost_table_serves_the_tenant_and_key_pages(spend: dict) -> None:
    """Cost per key and cost per model are one function (admin/usage.month_cost_table), scoped
    to a tenant or to one of its keys."""
    from responses_api.admin.usage import month_cost_table

    web, tenant = spend["web"], spend["tenant"]
    by_key = month_cost_table("key", tenant_id=tenant.pk)
    assert 'data-by="key"' in by_key and "<th>API key</th>" in by_key and f"web ({web.prefix}…)" in by_key
    assert '<td data-role="cost-total">$4.61</td>' in by_key and 'data-role="cost-today"' not in by_key
    by_model = month_cost_table("model", tenant_id=tenant.pk, key_id=web.pk, today=True)
    assert "<th>Model</th>" in by_model and ">claude<" in by_model and ">gpt<" not in by_model
    assert '<td data-role="cost-today">$3.60</td>' in by_model
    assert month_cost_table("model", tenant_id=None) == "—"  # a tenant not saved yet
