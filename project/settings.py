"""Settings, all read from the environment (django-environ).

With no DATABASE_URL and no REDIS_URL the gateway runs embedded: SQLite, an
in-process worker and an in-memory event log. Production sets both.
"""

import os
import tempfile
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


class _SecretFiles(environ.FileAwareMapping):
    """`NAME_FILE=/run/secrets/name` sets NAME from that file (compose `secrets:`, Kubernetes),
    for every setting read below; the file's trailing newline is not part of the value."""

    def __getitem__(self, key: str) -> str:
        value: str = super().__getitem__(key)
        return value.rstrip("\r\n") if self.env.get(key + "_FILE") else value


class _Env(environ.Env):
    ENVIRON = _SecretFiles()


env = _Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env.bool("DEBUG", default=False)

# A development secret is allowed only with DEBUG on; production must set it.
_DEV_SECRET = "dev-insecure-secret-key-do-not-use-in-production-0123456789abcdef"
SECRET_KEY = env.str("SECRET_KEY", default=_DEV_SECRET if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
if not DEBUG and (
    len(SECRET_KEY) < 50
    or len(set(SECRET_KEY)) < 5
    or SECRET_KEY == _DEV_SECRET
    or SECRET_KEY.startswith("django-insecure-")
):
    # Sessions, signed values and (by default) the sealing of stored secrets rest on it: a
    # weak production key is a startup error, not check --deploy's warning (security.W009).
    raise ImproperlyConfigured(
        "SECRET_KEY is too weak for DEBUG off: use 50+ random characters, e.g. "
        "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )

# Former SECRET_KEYs, after a rotation: sessions and signed values they made stay valid, and
# what they sealed (GATEWAY_ENCRYPTION_KEY unset) still opens.
SECRET_KEY_FALLBACKS = env.list("SECRET_KEY_FALLBACKS", default=[])

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"] if DEBUG else ["localhost", "127.0.0.1"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",  # the OpenAPI document (api/openapi_generation.py) and `manage.py spectacular`
    "responses_api",
    "tool_registry",
]

MIDDLEWARE = [
    "responses_api.api.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "responses_api.api.static.AsyncStaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
ASGI_APPLICATION = "project.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# --- Database -------------------------------------------------------------
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'gateway.sqlite3'}")}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.postgresql":
    # psycopg 3's pool: connections are reused across requests without
    # CONN_MAX_AGE (which must stay 0 with a pool).
    # During an outage a request waits at most DB_POOL_TIMEOUT for a connection, then gets a
    # 503 (responses_api/store/outages.py). A pool that cannot reconnect gives up after
    # DB_RECONNECT_TIMEOUT and the next request starts a fresh attempt, so the pool's
    # doubling backoff never leaves a recovered database unused for long.
    _db.setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DB_POOL_MIN_SIZE", default=2),
        "max_size": env.int("DB_POOL_MAX_SIZE", default=20),
        "timeout": env.float("DB_POOL_TIMEOUT", default=5.0),
        "reconnect_timeout": env.float("DB_RECONNECT_TIMEOUT", default=5.0),
    }
    _db["OPTIONS"].setdefault("connect_timeout", env.int("DB_CONNECT_TIMEOUT", default=3))
    # Server-side prepared statements (psycopg prepares a statement on its 5th run on a
    # connection): the stored create's one statement is then parsed and planned once per
    # connection instead of on every create (bench/README.md, "PostgreSQL CPU per stored
    # create"). They live in a server session, so a pooler that hands one client several
    # server sessions (PgBouncer in transaction mode before 1.21) needs DB_PREPARED_STATEMENTS=off.
    # Django's own cursors bind on the client and never prepare: this is the async pool's.
    if env.bool("DB_PREPARED_STATEMENTS", default=True):
        _db["OPTIONS"].setdefault("prepare_threshold", 5)
    _db["CONN_MAX_AGE"] = 0
    _db["CONN_HEALTH_CHECKS"] = False
elif _db["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers proceed during a write; IMMEDIATE avoids the
    # "database is locked" upgrade deadlock between concurrent writers.
    _db.setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
    # Tests use a file too: Django's default in-memory shared-cache test
    # database locks whole tables and ignores the busy timeout.
    # One file per test process, so parallel runs never share it.
    _test_db = Path(tempfile.gettempdir()) / f"gateway-test-{os.getpid()}.sqlite3"
    _db["TEST"] = {"NAME": env.str("GATEWAY_TEST_SQLITE_PATH", default=str(_test_db))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, Celery, event log --------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
EMBEDDED_WORKER = not REDIS_URL

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Background completion windows (`background_options.completion_window`, README.md "Background
# completion windows"): `2h` and `8h` runs wait on their own queues and may run this long.
GATEWAY_BACKGROUND_WINDOW_2H_SECONDS = env.int("GATEWAY_BACKGROUND_WINDOW_2H_SECONDS", default=7200)
GATEWAY_BACKGROUND_WINDOW_8H_SECONDS = env.int("GATEWAY_BACKGROUND_WINDOW_8H_SECONDS", default=28800)
GATEWAY_BACKGROUND_QUEUES = {"2h": "responses.2h", "8h": "responses.8h"}
# The queues a worker consumes unless started with -Q, in the order it takes from them: the
# default queue (soonest background runs, beat's tasks) first, then the windows' (the broker's
# `queue_order_strategy` below: a worker takes a 2h run only when the default queue is empty).
CELERY_TASK_QUEUES = {
    name: {"exchange": name, "routing_key": name} for name in ("celery", *GATEWAY_BACKGROUND_QUEUES.values())
}
# Background runs wait on models almost all the time: one worker process holds many, each a
# thread of Celery's threads pool waiting on the process's one event loop where the run goes on
# (responses_api/tasks.py; docs/architecture.md, "Background runs"). GATEWAY_WORKER_CONCURRENCY is
# how many runs one process takes at once (and, with the prefetch multiplier of 1, how many
# messages it reserves).
CELERY_WORKER_POOL = env.str("CELERY_WORKER_POOL", default="threads")
GATEWAY_WORKER_CONCURRENCY = env.int("GATEWAY_WORKER_CONCURRENCY", default=200)
CELERY_WORKER_CONCURRENCY = GATEWAY_WORKER_CONCURRENCY
# The longest a background run may take from its claim: past it, the gateway itself ends it
# `failed`, code `time_limit_exceeded` (orchestration/worker.background_run_seconds; Celery's
# own time limits work in its prefork pool only).
GATEWAY_BACKGROUND_MAX_SECONDS = env.float("GATEWAY_BACKGROUND_MAX_SECONDS", default=1800.0)
# After SIGTERM a worker claims no run; the running ones have this long to end, then are ended
# `failed` (`server_shutting_down`). Compose's stop_grace_period for the worker outlasts it.
GATEWAY_WORKER_DRAIN_SECONDS = env.float("GATEWAY_WORKER_DRAIN_SECONDS", default=600.0)
# How long a worker's run waits for a database connection. A web request waits DB_POOL_TIMEOUT
# (its client is waiting; a quick 503 is better); a background run has no client waiting, and
# hundreds of runs ending in the same second queue for the pool (project/celery.py applies it).
GATEWAY_WORKER_DB_TIMEOUT = env.float("GATEWAY_WORKER_DB_TIMEOUT", default=60.0)
# The longest any task of a worker lasts: the longest run, its drain, and the stop's grace.
# In a prefork pool Celery kills a task past it; the event log and leases are kept this long.
_LONGEST_RUN_SECONDS = max(
    GATEWAY_BACKGROUND_MAX_SECONDS, GATEWAY_BACKGROUND_WINDOW_2H_SECONDS, GATEWAY_BACKGROUND_WINDOW_8H_SECONDS
)
CELERY_TASK_TIME_LIMIT = int(_LONGEST_RUN_SECONDS + GATEWAY_WORKER_DRAIN_SECONDS + 60)
# A task not acknowledged this long after its delivery is delivered again (acks_late: a run's
# task is acknowledged at its end). Longer than the longest run, so that a running one is not;
# one that is (or a killed worker's) finds its response claimed and does nothing but reap it.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_TASK_TIME_LIMIT + 600,
    # Queues in the order the worker lists them, not round robin: the windows' are lower priority.
    "queue_order_strategy": "priority",
}
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- Gateway ---------------------------------------------------------------
GATEWAY_CONFIG = env.str("GATEWAY_CONFIG", default="")
# Fernet keys for upstream secrets stored in the database and sealed blobs, newest first:
# the first seals, any opens (sealing.py). Unset: derived from SECRET_KEY, so that a
# single secret suffices for small deployments; SECRET_KEY (and SECRET_KEY_FALLBACKS) stay
# opening keys either way, so setting or rotating a key never breaks what was sealed before.
GATEWAY_ENCRYPTION_KEY = env.list("GATEWAY_ENCRYPTION_KEY", default=[])
GATEWAY_SSE_KEEPALIVE_SECONDS = env.float("GATEWAY_SSE_KEEPALIVE_SECONDS", default=15.0)
GATEWAY_UPSTREAM_TIMEOUT = env.float("GATEWAY_UPSTREAM_TIMEOUT", default=120.0)
GATEWAY_UPSTREAM_CONNECT_TIMEOUT = env.float("GATEWAY_UPSTREAM_CONNECT_TIMEOUT", default=5.0)
# Upstream connections per process: one per open stream (bench: 2,000 streams per process).
GATEWAY_UPSTREAM_MAX_CONNECTIONS = env.int("GATEWAY_UPSTREAM_MAX_CONNECTIONS", default=4000)
# How long authenticated keys and model routes are cached in-process; an
# admin change or a revoked key takes effect within this many seconds.
GATEWAY_CACHE_SECONDS = env.float("GATEWAY_CACHE_SECONDS", default=5.0)
# Garbage-collector thresholds for the web process (see project/asgi.py).
GATEWAY_GC_THRESHOLDS = tuple(int(v) for v in env.list("GATEWAY_GC_THRESHOLDS", default=["50000", "20", "100"]))
GATEWAY_MAX_REQUEST_BYTES = env.int("GATEWAY_MAX_REQUEST_BYTES", default=32 * 1024 * 1024)
# Prometheus /metrics: served only to this bearer token (empty: no /metrics at all).
GATEWAY_METRICS_TOKEN = env.str("GATEWAY_METRICS_TOKEN", default="")
# WebSocket mode (responses_api/api/websocket/).
# A reader of a worker-run response's event log looks at the stored response after this long
# without an event (a log that is down, lost or silent never keeps it past the response's end),
# and a worker waits this long at a run's end for a log that refused its events to take them.
GATEWAY_EVENT_LOG_IDLE_CHECK = env.float("GATEWAY_EVENT_LOG_IDLE_CHECK", default=5.0)
GATEWAY_EVENT_LOG_RETRY_SECONDS = env.float("GATEWAY_EVENT_LOG_RETRY_SECONDS", default=60.0)
# After SIGTERM, how long open streams and WebSocket turns may take to finish before they are
# ended `failed` (retryable `server_shutting_down`) and the process exits (orchestration/lifecycle.py).
# A container's stop grace period must be longer (compose: stop_grace_period).
GATEWAY_DRAIN_SECONDS = env.float("GATEWAY_DRAIN_SECONDS", default=20.0)
GATEWAY_WS_MAX_SECONDS = env.float("GATEWAY_WS_MAX_SECONDS", default=3600.0)
GATEWAY_WS_IDLE_SECONDS = env.float("GATEWAY_WS_IDLE_SECONDS", default=600.0)
GATEWAY_WS_MAX_CONNECTIONS_PER_KEY = env.int("GATEWAY_WS_MAX_CONNECTIONS_PER_KEY", default=64)
# Messages waiting behind the running turn of a connection, and their bytes: past either, a
# message is refused (429 websocket_queue_full) instead of held. A message arriving at an empty
# queue is always taken (its own bound is GATEWAY_MAX_REQUEST_BYTES).
GATEWAY_WS_MAX_QUEUED_MESSAGES = env.int("GATEWAY_WS_MAX_QUEUED_MESSAGES", default=16)
GATEWAY_WS_MAX_QUEUED_BYTES = env.int("GATEWAY_WS_MAX_QUEUED_BYTES", default=16 * 1024 * 1024)
# Lanes (`stream_id`): responses of one connection running at once (more creates wait, counted
# in the queue bounds above), and the distinct named lanes a connection may use (OpenAI's WebSocket
# mode: 16 and 32). Steering: accepted inputs waiting for one response (too_many_pending_steers).
GATEWAY_WS_MAX_ACTIVE_RESPONSES = env.int("GATEWAY_WS_MAX_ACTIVE_RESPONSES", default=16)
GATEWAY_WS_MAX_STREAMS = env.int("GATEWAY_WS_MAX_STREAMS", default=32)
GATEWAY_WS_MAX_PENDING_STEERS = env.int("GATEWAY_WS_MAX_PENDING_STEERS", default=8)
# Each lane keeps its last model call's context converted to the upstream's dialect, so that its
# next continuation converts only what it adds (protocol/prefix.py): up to this many items (a
# longer context is converted in full every turn); 0: no lane keeps one.
GATEWAY_WS_PREFIX_CACHE_MAX_ITEMS = env.int("GATEWAY_WS_PREFIX_CACHE_MAX_ITEMS", default=10000)
DATA_UPLOAD_MAX_MEMORY_SIZE = GATEWAY_MAX_REQUEST_BYTES

# --- Static files ------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
# Uploaded files' bytes (/v1/files): local disk under GATEWAY_FILES_ROOT by default.
GATEWAY_FILES_ROOT = Path(env.str("GATEWAY_FILES_ROOT", default=str(BASE_DIR / "gateway-files")))
# The largest upload /v1/files takes (its own bound: GATEWAY_MAX_REQUEST_BYTES is the JSON
# bodies'); an upload streams through a temporary file to the storage, never whole in memory.
GATEWAY_FILES_MAX_BYTES = env.int("GATEWAY_FILES_MAX_BYTES", default=100 * 1024 * 1024)
# The most characters of a file's text (a PDF's extracted, a text file's) a model is given.
GATEWAY_FILES_MAX_TEXT_CHARS = env.int("GATEWAY_FILES_MAX_TEXT_CHARS", default=200_000)
# Uploaded files in an S3-compatible object store instead of GATEWAY_FILES_ROOT (django-storages'
# S3 backend, boto3): on when a bucket is named. Credentials come from boto3's own chain
# (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, an instance role); the endpoint names a
# non-AWS store (MinIO, Ceph, R2, ...). Objects are private; downloads go through /v1/files.
GATEWAY_FILES_S3_BUCKET = env.str("GATEWAY_FILES_S3_BUCKET", default="")
GATEWAY_FILES_S3_ENDPOINT_URL = env.str("GATEWAY_FILES_S3_ENDPOINT_URL", default="")
GATEWAY_FILES_S3_REGION = env.str("GATEWAY_FILES_S3_REGION", default="")
GATEWAY_FILES_S3_PREFIX = env.str("GATEWAY_FILES_S3_PREFIX", default="gateway-files")
GATEWAY_FILES_STORAGE: dict[str, object] = (
    {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": GATEWAY_FILES_S3_BUCKET,
            "endpoint_url": GATEWAY_FILES_S3_ENDPOINT_URL or None,
            "region_name": GATEWAY_FILES_S3_REGION or None,
            "location": GATEWAY_FILES_S3_PREFIX,
            "default_acl": "private",
            "file_overwrite": True,  # each name is a new file id: no existence check per upload
        },
    }
    if GATEWAY_FILES_S3_BUCKET
    else {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(GATEWAY_FILES_ROOT)}}
)

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "gateway_files": GATEWAY_FILES_STORAGE,
    "staticfiles": {
        # Hashed names from collectstatic's manifest; the plain ones until it ran (api/static.py).
        "BACKEND": "responses_api.api.static.StaticStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- Security (production) -----------------------------------------------------
# No SECURE_PROXY_SSL_HEADER: Django would believe X-Forwarded-Proto from anyone. uvicorn's
# --proxy-headers sets the request's scheme from it only for FORWARDED_ALLOW_IPS (the proxy).
SECURE_PROXY_SSL_HEADER = None
# A plain-HTTP trial (http://localhost:8000, no TLS proxy): no redirect to HTTPS, whatever
# SECURE_SSL_REDIRECT says, and session and CSRF cookies without Secure, which a browser
# would not send back over http:// (the admin login would fail its CSRF check).
GATEWAY_PLAIN_HTTP = env.bool("GATEWAY_PLAIN_HTTP", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not (DEBUG or GATEWAY_PLAIN_HTTP))
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not (DEBUG or GATEWAY_PLAIN_HTTP))
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False) and not GATEWAY_PLAIN_HTTP
# Container/load-balancer health probes speak plain HTTP to the app directly: never redirect
# them (docker-compose.yml sets SECURE_SSL_REDIRECT=true behind a TLS-terminating proxy).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# The /v1 views (responses_api.api.drf.ApiView) name these classes themselves; the defaults say the
# same for any other DRF view.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["responses_api.api.drf_policies.BearerKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["responses_api.api.drf_policies.HasApiKey"],
    "DEFAULT_PARSER_CLASSES": ["responses_api.api.drf_policies.ProtocolJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["responses_api.api.drf_policies.ProtocolJSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "responses_api.api.drf_policies.ProtocolNegotiation",
    "EXCEPTION_HANDLER": "responses_api.api.exception_handlers.drf_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "UNAUTHENTICATED_TOKEN": None,
    "DEFAULT_SCHEMA_CLASS": "responses_api.api.openapi_generation.GatewayAutoSchema",
}

# The OpenAPI document of /v1 (responses_api/api/openapi_generation.py), served at /v1/openapi.json.
SPECTACULAR_SETTINGS = {
    "TITLE": "Open Responses gateway",
    "VERSION": "v1",
    "OAS_VERSION": "3.1.0",
    "DESCRIPTION": "The Open Responses / OpenAI Responses API, with stored history, served in front of "
    "any LLM upstream. Authenticate with `Authorization: Bearer <API key>`.",
    "SERVERS": [{"url": "/"}],
    "SCHEMA_PATH_PREFIX": "/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,  # the choices are their own names
    "TAGS": [
        {"name": "Responses", "description": "Create, retrieve, cancel and delete responses."},
        {"name": "Conversations", "description": "Conversations and their items."},
        {"name": "History", "description": "Browse stored responses, threads and usage."},
        {"name": "Models", "description": "The models this gateway routes."},
        {"name": "Pass-through", "description": "OpenAI-compatible endpoints relayed to the routed upstream."},
        {"name": "Documentation"},
    ],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "responses_api.api.openapi_generation.add_components",
    ],
}

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "responses_api.logging.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}

# --- Tool registry ------------------------------------------------------------
# Modules whose functions may be registered as python tools.
GATEWAY_PYTHON_TOOL_MODULES = frozenset(env.list("GATEWAY_PYTHON_TOOL_MODULES", default=[]))
# Egress exceptions for the tools and MCP servers an operator registers (hostnames, *.domains,
# IPs, CIDRs, each optionally :port); the admin adds more. Never applied to a URL a client sends.
GATEWAY_EGRESS_ALLOW = env.list("GATEWAY_EGRESS_ALLOW", default=[])
# The separate, explicit exceptions for ad-hoc MCP server URLs that API clients send (same
# syntax; each tenant may have more in the admin). Empty: public addresses only.
GATEWAY_MCP_ADHOC_EGRESS_ALLOW = env.list("GATEWAY_MCP_ADHOC_EGRESS_ALLOW", default=[])
# Upper bound on model calls in one server-side tool loop.
GATEWAY_MAX_TOOL_ITERATIONS = env.int("GATEWAY_MAX_TOOL_ITERATIONS", default=10)
# Ad-hoc MCP servers (`{"type": "mcp", "server_url": ...}` in a request): off means only
# servers registered in the admin (or GATEWAY_CONFIG mcp_servers:) can be used.
GATEWAY_MCP_ADHOC = env.bool("GATEWAY_MCP_ADHOC", default=True)
# Seconds one ad-hoc MCP call or listing may take.
GATEWAY_MCP_TIMEOUT = env.float("GATEWAY_MCP_TIMEOUT", default=30.0)

# --- Background responses -------------------------------------------------------
# How long a worker-run response's event log is kept after its terminal event.
GATEWAY_EVENT_LOG_TTL_SECONDS = env.int("GATEWAY_EVENT_LOG_TTL_SECONDS", default=3600)
# A running worker refreshes its heartbeat this often; the reaper fails runs silent for 4x as long.
GATEWAY_HEARTBEAT_SECONDS = env.float("GATEWAY_HEARTBEAT_SECONDS", default=5.0)
# Web processes beat this often (orchestration/liveness.py): a process silent for 3 beats is dead,
# and a live one fails its open responses; the rate-limit leases a process renews at each beat
# last GATEWAY_LEASE_SECONDS, so a dead process's concurrency slots return within that.
GATEWAY_PROCESS_HEARTBEAT_SECONDS = env.float("GATEWAY_PROCESS_HEARTBEAT_SECONDS", default=5.0)
GATEWAY_LEASE_SECONDS = env.float("GATEWAY_LEASE_SECONDS", default=30.0)
GATEWAY_REAPER_INTERVAL_SECONDS = env.float("GATEWAY_REAPER_INTERVAL_SECONDS", default=30.0)
# A foreground (web-served) response still open after this long lost its process: the reaper fails it.
GATEWAY_FOREGROUND_MAX_SECONDS = env.int("GATEWAY_FOREGROUND_MAX_SECONDS", default=3600)
# A background response no worker has started after this long lost its task: the reaper fails it.
GATEWAY_QUEUED_MAX_SECONDS = env.float("GATEWAY_QUEUED_MAX_SECONDS", default=3600.0)
# Retention: responses older than this many days are deleted (0: keep forever); a tenant's
# The router (router.py): retries before the first byte with exponential backoff and full
# jitter (a 429's Retry-After honoured) within a total budget; a target failing this many times
# in a row is skipped for the cooldown while another can serve.
GATEWAY_ROUTER_MAX_RETRIES = env.int("GATEWAY_ROUTER_MAX_RETRIES", default=1)
GATEWAY_ROUTER_RETRY_BUDGET_SECONDS = env.float("GATEWAY_ROUTER_RETRY_BUDGET_SECONDS", default=10.0)
GATEWAY_ROUTER_BACKOFF_SECONDS = env.float("GATEWAY_ROUTER_BACKOFF_SECONDS", default=0.25)
GATEWAY_ROUTER_BACKOFF_MAX_SECONDS = env.float("GATEWAY_ROUTER_BACKOFF_MAX_SECONDS", default=4.0)
GATEWAY_ROUTER_COOLDOWN_FAILURES = env.int("GATEWAY_ROUTER_COOLDOWN_FAILURES", default=3)
GATEWAY_ROUTER_COOLDOWN_SECONDS = env.float("GATEWAY_ROUTER_COOLDOWN_SECONDS", default=30.0)

# Rate limits and budgets (limits.py; set per tenant and key in the admin or the config file):
# with Redis unreachable, a request is let through unchecked (True, logged) or refused with a
# 503 (False).
GATEWAY_RATE_LIMIT_FAIL_OPEN = env.bool("GATEWAY_RATE_LIMIT_FAIL_OPEN", default=True)

# Budget alerts (orchestration/alerts.py; webhooks set in the admin or the config file): each
# delivery is tried this many times more after a failure, GATEWAY_ALERT_RETRY_SECONDS apart at
# first and doubling (at most 10 minutes), each attempt given GATEWAY_ALERT_TIMEOUT_SECONDS.
GATEWAY_ALERT_RETRIES = env.int("GATEWAY_ALERT_RETRIES", default=5)
GATEWAY_ALERT_RETRY_SECONDS = env.float("GATEWAY_ALERT_RETRY_SECONDS", default=10.0)
GATEWAY_ALERT_TIMEOUT_SECONDS = env.float("GATEWAY_ALERT_TIMEOUT_SECONDS", default=10.0)
# A delivery still pending and untried for this long (at least longer than its retries wait) lost
# its task: the periodic sweep (beat's `requeue-alert-deliveries`, or the embedded process's beat)
# enqueues it again, every GATEWAY_ALERT_SWEEP_SECONDS.
GATEWAY_ALERT_REQUEUE_SECONDS = env.float("GATEWAY_ALERT_REQUEUE_SECONDS", default=300.0)
GATEWAY_ALERT_SWEEP_SECONDS = env.float("GATEWAY_ALERT_SWEEP_SECONDS", default=60.0)
# Per-minute and concurrency limits alert too (the owner's alert_thresholds, 80% and 100% by
# default): each threshold of each limit at most once per this many seconds, however long the
# use stays there (a key kept at its limit would otherwise alert every minute).
GATEWAY_LIMIT_ALERT_WINDOW_SECONDS = env.float("GATEWAY_LIMIT_ALERT_WINDOW_SECONDS", default=3600.0)
# How long the Messages front door remembers a stored turn for the next one to chain onto
# (orchestration/message_turns.py): a Claude Code session idle longer starts a new chain.
GATEWAY_MESSAGES_CHAIN_SECONDS = env.float("GATEWAY_MESSAGES_CHAIN_SECONDS", default=3600.0)
# Output guardrails: how many characters of a streamed answer (and of a tool call's arguments)
# stay back until more follows, so a match up to this long is seen whole before any of it is
# sent (protocol/output_guard.py). Only streams an output guardrail applies to wait at all.
GATEWAY_GUARDRAIL_HOLDBACK_CHARS = env.int("GATEWAY_GUARDRAIL_HOLDBACK_CHARS", default=128)
# The model route vector stores embed their chunks (and search queries) with, through its
# upstream's /v1/embeddings (orchestration/vector_stores.py); fixed on a store when it is made.
# Empty: vector stores are searched by full text only.
GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL = env.str("GATEWAY_VECTOR_STORE_EMBEDDINGS_MODEL", default="")
# A file being ingested whose worker has not renewed its claim for this long lost its task (a
# process restarted): the web processes' reaper enqueues it again.
GATEWAY_VECTOR_STORE_INGEST_STALE_SECONDS = env.float("GATEWAY_VECTOR_STORE_INGEST_STALE_SECONDS", default=600.0)

# own retention_days (admin) overrides it. Runs every GATEWAY_RETENTION_INTERVAL_SECONDS on beat.
GATEWAY_RETENTION_DAYS = env.int("GATEWAY_RETENTION_DAYS", default=0)
GATEWAY_RETENTION_INTERVAL_SECONDS = env.float("GATEWAY_RETENTION_INTERVAL_SECONDS", default=3600.0)
CELERY_BEAT_SCHEDULE = {
    "reap-stale-responses": {
        "task": "responses_api.reap_stale_responses",
        "schedule": GATEWAY_REAPER_INTERVAL_SECONDS,
    },
    "expire-responses": {
        "task": "responses_api.expire_responses",
        "schedule": GATEWAY_RETENTION_INTERVAL_SECONDS,
    },
    "requeue-alert-deliveries": {
        "task": "responses_api.requeue_alert_deliveries",
        "schedule": GATEWAY_ALERT_SWEEP_SECONDS,
    },
}
