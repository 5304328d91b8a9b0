"""Tenants, keys, providers, routes, and stored responses with their items (stored once)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from tool_registry.egress import EgressPolicy

from .domain import Price
from .protocol import dialects as wire_dialects
from .protocol import guardrails as guardrail_rules
from .protocol.client_tools import SERVABLE_HOSTED_TOOLS
from .protocol.ids import new_id
from .protocol.prompts import PROMPT_ID_PATTERN, PromptError, PromptTemplate, check_template
from .protocol.request import COMPLETION_WINDOWS, CONTINUATION_ID_MAX_CHARS


def validate_base_url(value: str) -> None:
    """http(s) with a host; unlike URLField, single-label hosts (`http://vllm:8000/v1`) are fine."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ValidationError("Enter a valid URL, e.g. http://vllm:8000/v1.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("Enter an http(s) URL with a host, e.g. http://vllm:8000/v1.")


def config_managed_field() -> models.JSONField:
    """Which GATEWAY_CONFIG keys set an entry's fields (ops/config_sync.py): read-only in the admin."""
    return models.JSONField(
        default=list,
        blank=True,
        editable=False,
        help_text="The GATEWAY_CONFIG keys that set this entry's fields (read-only in the admin). "
        "Empty: not in the file, the admin's alone.",
    )


def default_alert_thresholds() -> list[int]:
    return [80, 100]


def validate_alert_thresholds(value: object) -> None:
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 < t <= 1000 for t in value
    ):
        raise ValidationError("A list of whole percentages from 1 to 1000, e.g. [80, 100].")


def config_source_field() -> models.CharField[str, str]:
    """Which config file manages an entry (ops/config_sync.py): a sync of another file never
    changes or un-manages it. Empty: no file (or a sync from before sources were recorded)."""
    return models.CharField(
        max_length=1000,
        blank=True,
        default="",
        db_default="",  # kept in the database: the previous release's inserts, during a rolling deploy, leave it out
        editable=False,
        help_text="The config file that manages this entry (its absolute path, or the bundled model of "
        "scripts/run). Empty: no file.",
    )


class RateLimits(models.Model):
    """Per-minute and concurrency limits and the budget of a key or of a tenant (all its keys
    together); limits.py counts them, alerts.py calls the webhooks at the budget's thresholds."""

    requests_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Requests per minute (a burst up to this, then this pace). Empty: no limit.",
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Tokens (input + output) per minute: reserved from an estimate when a request starts, "
        "settled with its real usage at its end. Empty: no limit.",
    )
    max_concurrent_requests = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Requests running at once (a stream or background run counts until it ends). Empty: no limit.",
    )
    budget_period = models.CharField(
        max_length=8,
        choices=[("day", "per day (UTC)"), ("month", "per calendar month (UTC)")],
        default="month",
        db_default="month",  # kept in the database: the previous release's inserts leave it out
    )
    budget_tokens = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Tokens spent per budget period (a tenant's: by all its keys together). Empty: no budget.",
    )
    budget_usd = models.DecimalField(
        "budget (USD)",
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="Cost spent per budget period (a tenant's: by all its keys together), priced by each model "
        "route's price table. Empty: no budget.",
    )
    alert_thresholds = models.JSONField(
        default=default_alert_thresholds,
        db_default=[80, 100],  # kept in the database: the previous release's inserts leave it out
        blank=True,
        help_text="Percentages of the budget at which the alert webhooks are called (once each per budget "
        "period), and of each per-minute and concurrency limit (those up to 100; once each per "
        "GATEWAY_LIMIT_ALERT_WINDOW_SECONDS), e.g. [80, 100]. Empty: no alerts.",
    )

    class Meta:
        abstract = True

    def clean(self) -> None:
        try:
            validate_alert_thresholds(self.alert_thresholds)
        except ValidationError as exc:
            raise ValidationError({"alert_thresholds": exc.messages}) from None


class Tenant(RateLimits):
    name = models.CharField(max_length=200, unique=True)
    mcp_adhoc_egress_allow = models.JSONField(
        "ad-hoc MCP egress allowlist",
        default=list,
        blank=True,
        help_text="Private hosts this tenant's API keys may name as an ad-hoc MCP server_url, e.g. "
        '["mcp.team.internal:8443", "10.2.0.0/16:443"] (host, *.domain, IP or CIDR, each '
        "optionally :port). Empty: public addresses only. The operator's egress allowlist "
        "for registered tools never applies to URLs clients send.",
    )
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Delete this tenant's responses (and their items) older than this many days. 0: keep "
        "forever. Empty: GATEWAY_RETENTION_DAYS (0 there too: keep forever). A response a newer one still "
        "continues is kept until that chain expires as a whole.",
    )
    config_managed = config_managed_field()
    config_source = config_source_field()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        entries = self.mcp_adhoc_egress_allow
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise ValidationError({"mcp_adhoc_egress_allow": "A list of strings."})
        try:
            EgressPolicy.from_strings(entries)
        except ValueError as exc:
            raise ValidationError({"mcp_adhoc_egress_allow": str(exc)}) from None


class ApiKey(RateLimits):
    """A client key, stored as its public prefix and the SHA-256 of the whole secret."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=32, unique=True)
    secret_hash = models.CharField(max_length=64)
    is_admin = models.BooleanField(default=False, help_text="May read every tenant's history (admin scope).")
    allowed_models = models.JSONField(
        default=list, blank=True, help_text="Model names this key may use; empty means all."
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="From this time the key is refused (401 api_key_expired). Empty: never expires.",
    )

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class Provider(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    # The upstream dialects registered (protocol/dialects.py), read when asked (a callable): a
    # new dialect is a choice with no migration.
    kind = models.CharField(max_length=32, choices=wire_dialects.choices, default="chat_completions")
    base_url = models.CharField(max_length=500, validators=[validate_base_url], help_text="e.g. http://vllm:8000/v1")
    api_key_env = models.CharField(
        max_length=200, blank=True, help_text="Name of the environment variable holding the key."
    )
    api_key_encrypted = models.TextField(
        blank=True, editable=False, help_text="The key, encrypted with GATEWAY_ENCRYPTION_KEY."
    )
    timeout = models.FloatField(
        default=120.0, help_text="Seconds a whole answer may take when it is not streamed from the upstream."
    )
    connect_timeout = models.FloatField(default=5.0, help_text="Seconds to open a connection.")
    first_byte_timeout = models.FloatField(
        default=60.0,
        help_text="Streamed answers: seconds from the request to the upstream's first chunk.",
    )
    idle_timeout = models.FloatField(
        default=30.0,
        help_text="Streamed answers: the longest silence between two chunks, in seconds.",
    )
    options = models.JSONField(
        default=dict,
        blank=True,
        help_text='Upstream quirks, e.g. {"max_tokens_param": "max_completion_tokens"}.',
    )
    headers = models.JSONField(default=dict, blank=True, help_text="Extra request headers.")
    enabled = models.BooleanField(default=True)
    config_managed = config_managed_field()
    config_source = config_source_field()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name


class ModelRoute(models.Model):
    """A public model name and the upstream targets that serve it."""

    name = models.CharField(max_length=200, unique=True, help_text="What clients send as `model`.")
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    run_on_worker = models.BooleanField(
        default=False, help_text="Run every response of this model on a background worker (long tool loops)."
    )
    hosted_tools = models.JSONField(
        default=dict,
        blank=True,
        help_text='Hosted tools this model serves with a registry tool, e.g. {"web_search": "corp_search", '
        '"file_search": "kb_search"}. A hosted tool not named here is dropped (logged, and '
        "named in the x-gateway-dropped-tools response header).",
    )
    context_window = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The model's context window in tokens. Empty: learned from the upstream where its "
        "/v1/models says (vLLM and SGLang report max_model_len), else unknown (no truncation "
        "and no length check).",
    )
    input_usd_per_million = models.DecimalField(
        "input price (USD per 1M tokens)",
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Prices the cost shown per key, model and tenant (/v1/usage, the admin) and USD budgets. "
        "Empty: this model's tokens cost nothing.",
    )
    output_usd_per_million = models.DecimalField(
        "output price (USD per 1M tokens)",
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
    )
    cached_input_usd_per_million = models.DecimalField(
        "cached input price (USD per 1M tokens)",
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Input tokens read from the upstream's prompt cache. Empty: the input price.",
    )
    cache_write_usd_per_million = models.DecimalField(
        "cache write price (USD per 1M tokens)",
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Input tokens written to the prompt cache (Anthropic's 5-minute writes, and any upstream's "
        "writes of unstated lifetime). Empty: 1.25x the input price, as Anthropic charges.",
    )
    cache_write_1h_usd_per_million = models.DecimalField(
        "1-hour cache write price (USD per 1M tokens)",
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Input tokens written to the prompt cache for an hour (Anthropic's 1-hour writes). "
        "Empty: 2x the input price, as Anthropic charges.",
    )
    config_managed = config_managed_field()
    config_source = config_source_field()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name

    @property
    def price(self) -> Price:
        return route_price(
            self.input_usd_per_million,
            self.output_usd_per_million,
            self.cached_input_usd_per_million,
            self.cache_write_usd_per_million,
            self.cache_write_1h_usd_per_million,
        )

    def clean(self) -> None:
        if not isinstance(self.hosted_tools, dict) or not all(
            k in SERVABLE_HOSTED_TOOLS and isinstance(v, str) and v for k, v in self.hosted_tools.items()
        ):
            raise ValidationError(
                {
                    "hosted_tools": "An object mapping "
                    + " or ".join(sorted(SERVABLE_HOSTED_TOOLS))
                    + " to a registry tool's name."
                }
            )


# A route's price columns, in `Price`'s order: `ModelRoute.objects.values_list(*PRICE_FIELDS)`.
PRICE_FIELDS = (
    "input_usd_per_million",
    "output_usd_per_million",
    "cached_input_usd_per_million",
    "cache_write_usd_per_million",
    "cache_write_1h_usd_per_million",
)


def route_price(*values: Decimal | None) -> Price:
    """A `Price` from a route's price columns (PRICE_FIELDS order); empty input/output: free."""
    return Price(values[0] or Decimal(0), values[1] or Decimal(0), *values[2:])


class RouteTarget(models.Model):
    route = models.ForeignKey(ModelRoute, on_delete=models.CASCADE, related_name="targets")
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="targets")
    upstream_model = models.CharField(max_length=200)
    weight = models.PositiveIntegerField(default=1, help_text="Share of traffic; 0 = fallback only.")
    priority = models.PositiveSmallIntegerField(
        default=0,
        help_text="Targets of the lowest priority take the traffic (by weight); higher ones only when "
        "those fail, are cooling down or are at their concurrency limit.",
    )
    max_concurrent = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Requests this target may serve at once (all web processes together). Empty: no limit.",
    )

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.provider.name}:{self.upstream_model}"


class Conversation(models.Model):
    """A durable conversation: an ordered list of items (stored once, in Item) that responses
    read as their context and append to when they finish."""

    id = models.CharField(primary_key=True, max_length=64)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="conversations")
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # Appends take positions from here while holding this row's lock: concurrent responses on
    # one conversation append whole (their input, then their output) in the order they finish.
    next_position = models.PositiveBigIntegerField(default=0, editable=False)

    class Meta:
        indexes = [models.Index(fields=["tenant", "-created_at"], name="conv_tenant_created")]

    def __str__(self) -> str:
        return self.id


class ConversationItem(models.Model):
    """An item's place in a conversation."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="conversation_items")
    item = models.ForeignKey("Item", on_delete=models.CASCADE, related_name="+")
    position = models.PositiveBigIntegerField()

    class Meta:
        ordering = ["conversation", "position"]
        constraints = [models.UniqueConstraint(fields=["conversation", "position"], name="conversation_item_slot")]

    def __str__(self) -> str:
        return f"{self.conversation_id} #{self.position}"


def new_prompt_id() -> str:
    """An id shaped like OpenAI's (`pmpt_` and 48 hex digits)."""
    return new_id("pmpt")


class Prompt(models.Model):
    """A reusable prompt (`prompt: {id, version, variables}` on a create): a tenant's own, or
    shared by every tenant (no tenant). Its versions are immutable rows; a change is a new one."""

    id = models.CharField(
        primary_key=True,
        max_length=64,
        default=new_prompt_id,
        validators=[RegexValidator(PROMPT_ID_PATTERN, "An id like pmpt_ followed by letters, digits, _ or -.")],
        help_text="What clients send as prompt.id (pmpt_...). Generated when left as is.",
    )
    name = models.CharField(max_length=200, help_text="A label for the admin; clients use the id.")
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="prompts",
        help_text="The tenant whose keys may use it. Empty: every tenant's.",
    )
    description = models.TextField(blank=True, default="")
    default_version = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The version a create without prompt.version gets. Empty (or a version it does not have): the newest.",
    )
    config_managed = config_managed_field()
    config_source = config_source_field()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"


class PromptVersion(models.Model):
    """One immutable version of a prompt: what a create with it gets (protocol/prompts.py says
    how it is applied). Saving never changes a stored version: a change is a new row."""

    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField(help_text="1, 2, ...: numbered in order, never reused.")
    instructions = models.TextField(
        blank=True,
        default="",
        help_text="The instructions ({{name}} places a variable). Empty: none.",
    )
    input = models.JSONField(
        default=list,
        blank=True,
        help_text='Messages put before the request\'s input, e.g. [{"role": "user", "content": "About {{topic}}"}].',
    )
    model = models.CharField(max_length=200, blank=True, default="", help_text="Used when the request names none.")
    tools = models.JSONField(null=True, blank=True, help_text="Used when the request sends no tools.")
    text_format = models.JSONField(null=True, blank=True, help_text="text.format, when the request sends none.")
    reasoning = models.JSONField(null=True, blank=True, help_text="Used when the request sends none.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["prompt", "version"], name="prompt_version_unique")]
        ordering = ["prompt", "version"]

    def __str__(self) -> str:
        return f"{self.prompt_id} v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            # Immutable: a create that used it must read the same template later (its echo names it).
            raise ValueError("A prompt version is immutable once saved; add a new version instead.")
        super().save(*args, **kwargs)

    def clean(self) -> None:
        super().clean()
        try:
            check_template(self.template())
        except PromptError as exc:
            raise ValidationError({exc.field or NON_FIELD_ERRORS: exc.message}) from None

    def template(self) -> PromptTemplate:
        return PromptTemplate(
            prompt_id=self.prompt_id,
            version=self.version,
            instructions=self.instructions or None,
            input=list(self.input or []),
            model=self.model or None,
            tools=self.tools,
            text_format=self.text_format,
            reasoning=self.reasoning,
        )


class Response(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        INCOMPLETE = "incomplete"

    # Still being generated (a worker's or a web process's), and ended.
    RUNNING = (Status.QUEUED, Status.IN_PROGRESS)
    ENDED = (Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.INCOMPLETE)

    # Every stored create writes an entry in each index of this table: the indexes are the
    # ones a query uses (Meta.indexes), without the `varchar_pattern_ops` copies Django adds to
    # text columns with db_index (no query here matches a prefix with LIKE) and without a
    # tenant index the (tenant, ...) ones already start with (bench/README.md, "PostgreSQL
    # CPU per stored create").
    id = models.CharField(primary_key=True, max_length=64)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="responses", db_index=False)
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True)
    previous_response = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="next_responses",
        db_constraint=True,
        db_index=False,  # Meta.indexes
    )
    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="responses",
        db_index=False,  # Meta.indexes
    )
    status = models.CharField(max_length=16, choices=Status.choices)  # indexed in Meta.indexes
    model = models.CharField(max_length=200)  # indexed in Meta.indexes
    upstream = models.CharField(max_length=300, blank=True, help_text="provider:upstream model used")
    instructions = models.TextField(null=True, blank=True)  # noqa: DJ001 - null: none were sent ("" was)
    params = models.JSONField(default=dict, help_text="Request-derived fields of the Response.")
    metadata = models.JSONField(default=dict, blank=True)
    error = models.JSONField(null=True, blank=True)
    incomplete_details = models.JSONField(null=True, blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Input tokens written to the prompt cache, and of those the ones written for one hour
    # (Anthropic prices 5-minute and 1-hour writes apart).
    cache_write_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_1h_tokens = models.PositiveIntegerField(null=True, blank=True)
    reasoning_tokens = models.PositiveIntegerField(null=True, blank=True)
    store = models.BooleanField(default=True)
    background = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    chain_purged = models.BooleanField(
        default=False,
        db_default=False,
        editable=False,  # db_default: the raw-SQL inserts leave it out
        help_text="An earlier response of its chain was purged: its context is gone, so continuing it "
        "fails with previous_response_not_found.",
    )
    # Worker-run responses: the validated request; heartbeat_at (null: not claimed yet), which a
    # claim sets to the latest its run may end (claimed_at + CELERY_TASK_TIME_LIMIT), since the
    # worker that claimed it beats for it (WorkerProcess, by served_by); a worker of a release
    # before (served_by empty) kept heartbeat_at itself as the run's last sign of life, and a
    # reaper of that release reads it so (selectors.response_jobs_stale).
    job = models.JSONField(null=True, blank=True, editable=False)
    on_worker = models.BooleanField(default=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The process serving it: the web process streaming a foreground response (WebProcess.id;
    # if it dies, a live one fails the row within seconds instead of the hour-long backstop), or
    # the worker process that claimed a worker-run one (WorkerProcess.id).
    served_by = models.CharField(max_length=128, blank=True, default="", db_default="", editable=False)
    # The reusable prompt and version a create used (`prompt`), for the history and /v1/usage.
    prompt_id = models.CharField(max_length=64, blank=True, default="", db_default="", editable=False)
    prompt_version = models.CharField(max_length=16, blank=True, default="", db_default="", editable=False)
    # `background_options` of the create (not fields of the Response object, so never echoed):
    # the completion window decides a background run's worker queue and time limit
    # (orchestration/windows.py); the continuation id is the client's opaque label of related runs.
    completion_window = models.CharField(
        max_length=8,
        choices=[(window, window) for window in COMPLETION_WINDOWS],
        default="soonest",
        db_default="soonest",
        editable=False,
    )
    continuation_id = models.CharField(
        max_length=CONTINUATION_ID_MAX_CHARS, blank=True, default="", db_default="", editable=False
    )

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="resp_tenant_created"),
            # Plain btrees where Django's db_index would add a LIKE copy too.
            models.Index(fields=["previous_response"], name="resp_previous"),
            models.Index(fields=["conversation"], name="resp_conversation"),
            models.Index(fields=["status"], name="resp_status"),
            models.Index(fields=["model"], name="resp_model"),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None:
            return None
        return self.input_tokens + (self.output_tokens or 0)


class Item(models.Model):
    """One conversation item, stored once and referenced by the responses that use it."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)  # Meta.indexes
    public_id = models.CharField(max_length=255)  # a client may name its items: 400 past this
    type = models.CharField(max_length=40)
    data = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # Items are looked up by public id within a tenant (item references, a conversation's
        # item): one index for both columns instead of one per column plus a LIKE copy.
        indexes = [models.Index(fields=["tenant", "public_id"], name="item_tenant_public_id")]

    def __str__(self) -> str:
        return self.public_id


class ResponseItem(models.Model):
    """An item's place in a response: part of its input or of its output."""

    class Role(models.IntegerChoices):
        INPUT = 0
        OUTPUT = 1

    # No index of its own: the unique (response, role, position) one starts with it.
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="response_items", db_index=False)
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="+")
    role = models.PositiveSmallIntegerField(choices=Role.choices)
    position = models.PositiveIntegerField()

    class Meta:
        ordering = ["response", "role", "position"]
        constraints = [models.UniqueConstraint(fields=["response", "role", "position"], name="response_item_slot")]

    def __str__(self) -> str:
        return f"{self.response_id} {self.get_role_display().lower()} #{self.position}"


class UsageRecord(models.Model):
    """The tokens of a call with no stored response: /v1/chat/completions and /v1/embeddings
    passed through to an upstream, a `store: false` response, a purged response. The usage
    API, budgets and the admin chart add them to the stored responses'."""

    class Endpoint(models.TextChoices):
        CHAT_COMPLETIONS = "chat.completions"
        EMBEDDINGS = "embeddings"
        PURGED_RESPONSE = "responses (purged)"  # a purged response's tokens, kept for usage and budgets
        UNSTORED_RESPONSE = "responses (store: false)"  # nothing else of it is kept
        MESSAGES = "messages"  # Anthropic's Messages front door (api/messages_views.py)
        GUARDRAIL_JUDGE = "guardrail.judge"  # a judge guardrail's model run (orchestration/guardrail_kinds.py)

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    endpoint = models.CharField(max_length=32, choices=Endpoint.choices)
    model = models.CharField(max_length=200)
    upstream = models.CharField(max_length=300, blank=True)
    status = models.PositiveSmallIntegerField(help_text="The HTTP status the client got.")
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Of the input tokens: read from the prompt cache, written to it, and written for one hour.
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_1h_tokens = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "-created_at"], name="usage_tenant_created")]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.model} ({self.created_at:%Y-%m-%d %H:%M})"


class WebProcess(models.Model):
    """A web process that is alive while it beats (orchestration/liveness.py): what it streams
    carries its id, and a live process fails the open responses of one that stopped beating."""

    id = models.CharField(primary_key=True, max_length=128)  # host:pid:random
    started_at = models.DateTimeField(default=timezone.now)
    beat_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return self.id


class WorkerProcess(models.Model):
    """A worker process that is alive while it beats (orchestration/worker.py, `_Running`): the
    runs it claimed carry its id (Response.served_by), and the reaper fails those of a process
    silent for 4 beats (`worker_lost`). One row per process and beat, whatever its number of
    runs: a beat of each run's row wrote a new version of every running row every
    GATEWAY_HEARTBEAT_SECONDS (12 per minute of a run: 10 of a one-minute run's 23 KB of WAL)."""

    id = models.CharField(primary_key=True, max_length=128)  # host:pid:random (responses_api/process.py)
    started_at = models.DateTimeField(default=timezone.now)
    beat_at = models.DateTimeField(default=timezone.now)
    # The runs it held at that beat (response ids): a row a run left in progress (its end could
    # not be stored) is reaped while its process lives on, as when each run beat for itself.
    runs = models.JSONField(default=list)

    def __str__(self) -> str:
        return self.id


class AlertWebhook(models.Model):
    """Where budget alerts go (alerts.py): every enabled webhook gets each alert, as a JSON POST
    signed with HMAC-SHA256 of its body under the secret (`X-Gateway-Signature: sha256=<hex>`)."""

    name = models.SlugField(max_length=100, unique=True)
    url = models.CharField(max_length=500, validators=[validate_base_url], help_text="e.g. https://hooks.corp/gw")
    secret_encrypted = models.TextField(
        blank=True, editable=False, help_text="The signing secret, encrypted with GATEWAY_ENCRYPTION_KEY."
    )
    enabled = models.BooleanField(default=True)
    config_managed = config_managed_field()
    config_source = config_source_field()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


class AlertDelivery(models.Model):
    """One alert sent (or being sent) to one webhook, with how its last attempt went."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"  # every attempt failed

    webhook = models.ForeignKey(AlertWebhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.JSONField(help_text="The body sent.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The sweep that re-enqueues deliveries a lost task left pending claims them by this.
    attempted_at = models.DateTimeField(
        blank=True, null=True, help_text="When it was last tried, or handed to a worker again."
    )

    class Meta:
        verbose_name_plural = "alert deliveries"

    def __str__(self) -> str:
        return f"{self.event.get('type', 'alert')} → {self.webhook_id} ({self.status})"


class MaintenanceRun(models.Model):
    """When a periodic job last ran and what it did (one row per job, e.g. `retention`), so the
    admin can say whether retention runs at all, whichever process (beat, embedded) ran it."""

    name = models.CharField(primary_key=True, max_length=64)
    ran_at = models.DateTimeField()
    result = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.ran_at:%Y-%m-%d %H:%M}"


class Guardrail(models.Model):
    """A check on what clients send or what they get (protocol/guardrails.py and output_guard.py
    run it): a kind and its config, where it applies, what it does on a match, and its scope.
    Every guardrail whose scope takes a request applies (a union: a narrower one never disables
    a wider one); within one guardrail, the scope fields it sets must all match (none set: all
    traffic)."""

    class Kind(models.TextChoices):
        PATTERNS = "patterns", "Patterns (regular expressions and word lists)"
        PII = "pii", "Personal data and credentials"
        MODERATION = "moderation", "A moderation endpoint (OpenAI's /v1/moderations shape)"
        JUDGE = "judge", "A judge model (a model route asked a policy question)"

    class AppliesTo(models.TextChoices):
        INPUT = "input", "Request input"
        OUTPUT = "output", "Model output text"
        TOOL_ARGUMENTS = "tool_arguments", "Tool-call arguments the model emits"
        TOOL_OUTPUT = "tool_output", "Outputs of tools the gateway runs"

    class Action(models.TextChoices):
        BLOCK = "block"
        REDACT = "redact"
        LOG = "log"

    name = models.CharField(max_length=200, unique=True, help_text="Named in a blocked request's error and the audit.")
    description = models.TextField(blank=True, default="")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    applies_to = models.CharField(max_length=16, choices=AppliesTo.choices, default=AppliesTo.INPUT)
    action = models.CharField(max_length=8, choices=Action.choices, default=Action.BLOCK)
    config = models.JSONField(
        default=dict,
        blank=True,
        help_text='patterns: {"categories": {"name": {"regex": [...], "words": [...]}}}; '
        'pii: {"categories": ["email", "phone", "card", "iban", "credential"], "phone_region": "US"} (empty: all); '
        'moderation: {"url": "http://.../v1/moderations", "model": "...", "api_key_env": "ENV_NAME", "timeout": 5, '
        '"fail_open": false, "categories": [...]}; judge: {"route": "a model route", "policy": "...", "timeout": 30, '
        '"fail_open": false, "categories": [...]}. '
        'Any kind: "on_stream": "buffer" or "log" (a kind that needs the whole answer, on a streamed output).',
    )
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="guardrails",
        help_text="Scope: this tenant.",
    )
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.CASCADE, null=True, blank=True, related_name="guardrails", help_text="Scope: this key."
    )
    route = models.ForeignKey(
        ModelRoute,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="guardrails",
        help_text="Scope: requests for this model route. None of tenant, key and route: all traffic.",
    )
    enabled = models.BooleanField(default=True)
    config_managed = config_managed_field()
    config_source = config_source_field()
    created_at = models.DateTimeField(default=timezone.now)
    # The definition's version: what the compiled detectors are remembered under.
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        if self.applies_to not in guardrail_rules.SERVED_APPLIES_TO:
            raise ValidationError({"applies_to": f"one of {', '.join(guardrail_rules.APPLIES_TO)}"})
        try:
            guardrail_rules.compile_detector(self.pk or 0, self.name, self.kind, self.action, self.config or {})
        except guardrail_rules.GuardrailConfigError as exc:
            where = exc.field if exc.field in ("kind", "action") else "config"
            raise ValidationError({where: f"{exc.field}: {exc}" if where == "config" else str(exc)}) from None
        judged_by = (self.config or {}).get("route") if self.kind == self.Kind.JUDGE else None
        if judged_by and not ModelRoute.objects.filter(name=judged_by).exists():
            raise ValidationError({"config": f"route: no model route is named '{judged_by}'"})


class GuardrailEvent(models.Model):
    """A guardrail's decision other than pass: what fired, where and for whom; never the text
    it matched."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    response_id = models.CharField(max_length=64, blank=True, default="")
    guardrail = models.ForeignKey(Guardrail, on_delete=models.SET_NULL, null=True, blank=True, related_name="events")
    guardrail_name = models.CharField(max_length=200)
    category = models.CharField(max_length=200)
    action = models.CharField(max_length=8, choices=Guardrail.Action.choices)
    where = models.CharField(max_length=40, help_text="responses, responses.compact, chat.completions, embeddings, ...")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.guardrail_name}: {self.action} {self.category} ({self.where})"


def new_file_id() -> str:
    """An id shaped like OpenAI's files' (`file-` and 48 hex digits: clients treat it as opaque)."""
    return "file-" + new_id("f").removeprefix("f_")


class StoredFile(models.Model):
    """An uploaded file (`POST /v1/files`): its bytes live in the `gateway_files` storage
    (Django's storage API: local disk by default), this row says whose it is and what it is.
    A tenant's files are its own: every look-up is by (tenant, id)."""

    id = models.CharField(primary_key=True, max_length=64, default=new_file_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="files", db_index=False)
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    purpose = models.CharField(max_length=32, help_text="user_data or assistants")
    filename = models.CharField(max_length=255)
    content_type = models.CharField(max_length=255, blank=True, default="")
    bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    storage_name = models.CharField(max_length=512, help_text="Its name in the gateway_files storage.")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "-created_at"], name="file_tenant_created")]

    def __str__(self) -> str:
        return f"{self.filename} ({self.id})"


def new_vector_store_id() -> str:
    return new_id("vs")


def new_file_batch_id() -> str:
    return new_id("vsfb")


class VectorStore(models.Model):
    """A searchable collection of a tenant's files (`/v1/vector_stores`). Its status, file counts
    and usage are read from its files; `embedding_model` is the route its chunks were embedded
    with, fixed at creation (GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL then): one store's vectors
    come from one model. Empty: full-text search only."""

    id = models.CharField(primary_key=True, max_length=64, default=new_vector_store_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="vector_stores", db_index=False)
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    name = models.CharField(max_length=256, blank=True, default="")
    description = models.CharField(max_length=512, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="", db_default="")
    expires_after_days = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_active_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["tenant", "-created_at"], name="vs_tenant_created")]

    def __str__(self) -> str:
        return f"{self.name or '(unnamed)'} ({self.id})"


class VectorStoreFileBatch(models.Model):
    """Files attached in one call (`/v1/vector_stores/{id}/file_batches`); its counts are its files'."""

    id = models.CharField(primary_key=True, max_length=64, default=new_file_batch_id, editable=False)
    vector_store = models.ForeignKey(VectorStore, on_delete=models.CASCADE, related_name="batches")
    cancelled = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.id


class VectorStoreFile(models.Model):
    """A file attached to a vector store: its ingestion's status (the worker's), attributes for
    filters, chunking, and what went wrong. Its public id is the file's."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"
        CANCELLED = "cancelled"
        FAILED = "failed"

    vector_store = models.ForeignKey(VectorStore, on_delete=models.CASCADE, related_name="files")
    file = models.ForeignKey(StoredFile, on_delete=models.CASCADE, related_name="vector_store_files")
    batch = models.ForeignKey(
        VectorStoreFileBatch, on_delete=models.SET_NULL, null=True, blank=True, related_name="files"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_PROGRESS)
    attributes = models.JSONField(default=dict, blank=True)
    max_chunk_size_tokens = models.PositiveIntegerField(default=800)
    chunk_overlap_tokens = models.PositiveIntegerField(default=400)
    usage_bytes = models.BigIntegerField(default=0, db_default=0)
    last_error = models.JSONField(null=True, blank=True)
    # When a worker took it, renewed while it works: a file in progress whose claim is older than
    # GATEWAY_VECTOR_STORE_INGEST_STALE_SECONDS (or never claimed) lost its task, and is enqueued again.
    claimed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["vector_store", "file"], name="vs_file_unique")]

    def __str__(self) -> str:
        return f"{self.file_id} in {self.vector_store_id}"


class VectorChunk(models.Model):
    """One chunk of an attached file's text, with its embedding (float32, little-endian) when
    the store has an embeddings route. Full-text search reads a tsvector column (PostgreSQL)
    or an FTS5 table (SQLite) that migration 0039 keeps beside this table, not in the model."""

    vector_store_file = models.ForeignKey(VectorStoreFile, on_delete=models.CASCADE, related_name="chunks")
    position = models.PositiveIntegerField()
    text = models.TextField()
    embedding = models.BinaryField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["vector_store_file", "position"], name="vs_chunk_file_pos")]

    def __str__(self) -> str:
        return f"chunk {self.position} of {self.vector_store_file_id}"
