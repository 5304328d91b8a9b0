"""Admin-managed tools, the egress allowlist, and the record of every executed tool call."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from responses_api.models import config_managed_field, config_source_field
from responses_api.ttlcache import TTLCache

from .egress import EgressDenied, EgressPolicy, EgressResolutionError, check_url_sync, parse_url

TOOL_NAME_VALIDATOR = RegexValidator(r"^[a-zA-Z0-9_-]{1,64}$", "1-64 letters, digits, '_' or '-'.")


def validate_json_schema(value: object) -> None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if not isinstance(value, dict):
        raise ValidationError("Parameters must be a JSON Schema object.")
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise ValidationError(f"Not a valid JSON Schema: {exc.message}") from None
    if value.get("type", "object") != "object":
        raise ValidationError("A tool's parameters schema must have type 'object'.")


class Tool(models.Model):
    class Executor(models.TextChoices):
        HTTP = "http", "HTTP webhook"
        PYTHON = "python", "Python function"

    name = models.CharField(max_length=64, unique=True, validators=[TOOL_NAME_VALIDATOR])
    description = models.TextField(blank=True)
    parameters = models.JSONField(
        default=dict,
        validators=[validate_json_schema],
        help_text="JSON Schema of the arguments (type: object).",
    )
    strict = models.BooleanField(default=True, help_text="Send the schema in strict form.")
    enabled = models.BooleanField(default=True)
    timeout = models.FloatField(default=30.0, help_text="Seconds before the call counts as failed.")
    executor = models.CharField(max_length=16, choices=Executor.choices, default=Executor.HTTP)
    url = models.URLField(max_length=500, blank=True, help_text="http executor: where arguments are POSTed.")
    headers_env = models.JSONField(
        default=dict,
        blank=True,
        help_text='http executor: header name -> environment variable holding its value, e.g. {"Authorization": "WEATHER_TOKEN"}.',
    )
    signing_secret_env = models.CharField(
        max_length=200,
        blank=True,
        help_text="http executor: environment variable holding the HMAC-SHA256 signing secret.",
    )
    python_callable = models.CharField(
        max_length=300,
        blank=True,
        help_text="python executor: 'module.path:function'; the module must be allowlisted in GATEWAY_PYTHON_TOOL_MODULES.",
    )
    tenants = models.ManyToManyField(
        "responses_api.Tenant",
        blank=True,
        related_name="tools",
        help_text="Tenants that may use this tool; none selected means every tenant.",
    )
    routes = models.ManyToManyField(
        "responses_api.ModelRoute",
        blank=True,
        related_name="tools",
        help_text="Model routes that get this tool automatically.",
    )
    run_on_worker = models.BooleanField(
        default=False, help_text="Responses using this tool run on a background worker."
    )
    defer_loading = models.BooleanField(
        default=False,
        help_text="Deferred: kept out of the model's tool list until the model finds it with tool search.",
    )
    config_managed = config_managed_field()
    config_source = config_source_field()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.executor == self.Executor.HTTP:
            if not self.url:
                raise ValidationError({"url": "An http tool needs a URL."})
            try:
                check_url_sync(self.url, EgressAllow.objects.policy())
            except EgressDenied as exc:
                raise ValidationError({"url": str(exc)}) from None
            except ValueError as exc:
                raise ValidationError({"url": str(exc)}) from None
        elif self.executor == self.Executor.PYTHON:
            module, _, function = self.python_callable.partition(":")
            if not module or not function:
                raise ValidationError({"python_callable": "Use 'module.path:function'."})
            if module not in settings.GATEWAY_PYTHON_TOOL_MODULES:
                raise ValidationError({"python_callable": f"Module '{module}' is not in GATEWAY_PYTHON_TOOL_MODULES."})


_policy_cache: TTLCache[str, EgressPolicy] = TTLCache(lambda: settings.GATEWAY_CACHE_SECONDS)


OPERATOR_ALLOWLIST = "GATEWAY_EGRESS_ALLOW (or the admin's Egress allowlist)"


class EgressAllowManager(models.Manager["EgressAllow"]):
    def policy(self) -> EgressPolicy:
        """Settings' GATEWAY_EGRESS_ALLOW plus the admin's allowlist (cached GATEWAY_CACHE_SECONDS):
        what registered tools and MCP servers may reach."""
        cached = _policy_cache.get("policy")
        if cached is not None:
            return cached[0]
        entries = [*settings.GATEWAY_EGRESS_ALLOW, *self.values_list("entry", flat=True)]
        policy = EgressPolicy.from_strings(entries, allowlist=OPERATOR_ALLOWLIST)
        return _policy_cache.put("policy", policy)

    @staticmethod
    def forget_policy() -> None:
        _policy_cache.clear()


class EgressAllow(models.Model):
    """An exception to the egress policy: a hostname (or *.domain), an IP or a CIDR."""

    entry = models.CharField(max_length=255, unique=True)
    note = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = EgressAllowManager()

    class Meta:
        verbose_name = "egress allowlist entry"
        verbose_name_plural = "egress allowlist"

    def __str__(self) -> str:
        return self.entry

    def clean(self) -> None:
        try:
            EgressPolicy.from_strings([self.entry])
        except ValueError as exc:
            raise ValidationError({"entry": str(exc)}) from None


class ToolCallRecord(models.Model):
    """One executed call per (response, call_id): a retried or redelivered run never repeats it."""

    response_id = models.CharField(max_length=64)
    call_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=64)
    arguments = models.TextField()
    output = models.TextField(null=True, blank=True)  # noqa: DJ001 - null: the call has not finished
    succeeded = models.BooleanField(null=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["response_id", "call_id"], name="one_execution_per_call")]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.call_id})"


def validate_name_list(value: object) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError("Expected a list of tool names.")


def validate_headers_env(value: object) -> None:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()
    ):
        raise ValidationError('Expected {"Header-Name": "ENV_VAR_NAME", ...}.')


class McpServer(models.Model):
    """A remote MCP server (streamable HTTP) whose tools requests can use by its label."""

    class Approval(models.TextChoices):
        ALWAYS = "always", "Always: every call waits for the user's approval"
        NEVER = "never", "Never: calls run at once"
        PER_TOOL = "per_tool", "Per tool: only the tools listed under 'approval tools'"

    label = models.CharField(
        max_length=64,
        unique=True,
        validators=[TOOL_NAME_VALIDATOR],
        help_text="The server_label clients use, and that mcp_call items carry.",
    )
    description = models.TextField(blank=True)
    url = models.URLField(max_length=500, help_text="The streamable-HTTP endpoint, e.g. https://mcp.example.com/mcp.")
    headers_env = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_headers_env],
        help_text='Header name -> environment variable holding its value, e.g. {"Authorization": "DOCS_MCP_TOKEN"}.',
    )
    allowed_tools = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_name_list],
        help_text="Tool names requests may use; empty means every tool the server lists.",
    )
    approval = models.CharField(max_length=16, choices=Approval.choices, default=Approval.ALWAYS)
    approval_tools = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_name_list],
        help_text="Per-tool approval: the tools whose calls wait for approval.",
    )
    timeout = models.FloatField(default=30.0, help_text="Seconds for one list or call before it counts as failed.")
    cache_seconds = models.PositiveIntegerField(default=300, help_text="How long a tool listing is reused.")
    defer_loading = models.BooleanField(
        default=False,
        help_text="Deferred: the server's tools stay out of the model's tool list until found with tool search.",
    )
    enabled = models.BooleanField(default=True)
    tenants = models.ManyToManyField(
        "responses_api.Tenant",
        blank=True,
        related_name="mcp_servers",
        help_text="Tenants that may use this server; none selected means every tenant.",
    )
    routes = models.ManyToManyField(
        "responses_api.ModelRoute",
        blank=True,
        related_name="mcp_servers",
        help_text="Model routes that get this server's tools automatically.",
    )
    tools_cache = models.JSONField(default=list, blank=True, editable=False)
    tools_fetched_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    config_managed = config_managed_field()
    config_source = config_source_field()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["label"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.label

    def clean(self) -> None:
        if self.url:
            policy = EgressAllow.objects.policy()
            try:
                check_url_sync(self.url, policy)
            except EgressResolutionError as exc:
                # An allowlisted name (a compose service, say) may not resolve where config is
                # synced; every connection resolves and checks it again anyway.
                _, host, port, _ = parse_url(self.url)
                if not policy.host_allowed(host, port):
                    raise ValidationError({"url": str(exc)}) from None
            except (EgressDenied, ValueError) as exc:
                raise ValidationError({"url": str(exc)}) from None
        if self.approval == self.Approval.PER_TOOL and not self.approval_tools:
            raise ValidationError({"approval_tools": "Per-tool approval needs at least one tool name."})
