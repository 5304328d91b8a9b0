"""The operator's admin: stored responses and their conversations, usage, keys, providers, routes.

One module an area: `responses` (the response list, a response's page and its thread),
`keys` (tenants and API keys), `usage` (the usage page, cost tables, limits in use),
`providers` (providers, routes and their targets' health), `alerts` (budget alert webhooks
and deliveries), `maintenance` (hiding and purging responses, retention), `site` (the front
page); `common` holds what they share. Importing the package registers every admin.

Reads go through responses_api.history.selectors and writes through
responses_api.store.services; lists join what they show (`list_select_related`)
and never load the large JSON columns.
"""

from __future__ import annotations

from ..conversations import admin as conversations_admin  # noqa: F401 - registers ConversationAdmin
from ..files import admin as files_admin  # noqa: F401 - registers StoredFileAdmin
from . import alerts, guardrails, keys, prompts, providers, responses, site  # noqa: F401 - each registers its admins
