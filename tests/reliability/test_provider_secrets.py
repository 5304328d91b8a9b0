"""A provider key the gateway cannot have (sealed under an encryption key the operator dropped,
or its variable unset or empty), on real processes: a 503 `provider_misconfigured` naming the
provider and the remedy (never a 500), counted with its model; the web process names it at
start-up; `manage.py reseal_secrets` moves what is sealed to the first key."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet

from tests.reliability.deployment import Deployment
from tests.reliability.test_metrics import value
from tests.support.servers import find_postgres_bindir, find_redis_server
from tests.support.upstream import Reply, ScriptedUpstream

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - no binaries, whatever the finder raises: skip
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)

K1, K2 = Fernet.generate_key().decode(), Fernet.generate_key().decode()
TOKEN = "scrape-token-secrets"


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    base = Path(tempfile.mkdtemp(prefix="gateway-secrets-"))
    multiproc = base / "prometheus"
    multiproc.mkdir()
    with ScriptedUpstream() as upstream:
        upstream.set_default("m", Reply(text="ok"))
        upstream.set_default("e", Reply(text="ok"))
        upstream.set_default("z", Reply(text="ok"))
        config = {
            "providers": [
                {"name": "sealed", "base_url": upstream.base_url, "api_key": "sk-sealed-under-k1"},
                {"name": "unset-env", "base_url": upstream.base_url, "api_key_env": "GATEWAY_TEST_UNSET_KEY"},
                {"name": "empty-env", "base_url": upstream.base_url, "api_key_env": "GATEWAY_TEST_EMPTY_KEY"},
            ],
            "models": [
                {"name": "m", "targets": [{"provider": "sealed", "model": "m"}]},
                {"name": "e", "targets": [{"provider": "unset-env", "model": "e"}]},
                {"name": "z", "targets": [{"provider": "empty-env", "model": "z"}]},
            ],
            "alert_webhooks": [{"name": "ops", "url": "https://hooks.example/gw", "secret": "whsec-under-k1"}],
        }
        deployed = Deployment(
            base,
            upstream.base_url,
            config=config,
            env={
                "GATEWAY_ENCRYPTION_KEY": K1,  # the provider key is sealed under K1 by the sync
                "GATEWAY_METRICS_TOKEN": TOKEN,
                "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
                "GATEWAY_TEST_EMPTY_KEY": "",
            },
        )
        try:
            yield deployed
        finally:
            deployed.stop()
            shutil.rmtree(base, ignore_errors=True)


def _stop(deployment: Deployment, proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(20)
    deployment.processes.remove(proc)


def _create(deployment: Deployment, model: str) -> httpx.Response:
    with deployment.client() as client:
        return client.post("/v1/responses", json={"model": model, "input": "hi"})


def test_a_provider_key_no_listed_key_opens_is_a_503_named_at_start_and_resealed(deployment: Deployment) -> None:
    deployment.env["GATEWAY_ENCRYPTION_KEY"] = K2  # the operator dropped K1
    (deployment.base_dir / "web.log").unlink(missing_ok=True)
    web = deployment.start_web()
    try:
        refused = _create(deployment, "m")
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "provider_misconfigured"
        assert "'sealed'" in error["message"] and "reseal_secrets" in error["message"]
        assert "sk-sealed-under-k1" not in refused.text
        # Named at start-up (a check the process runs beside serving), with the providers whose
        # variable is unset or empty.
        deadline = time.monotonic() + 30
        while "secrets: Provider 'empty-env'" not in deployment.log("web.log") and time.monotonic() < deadline:
            time.sleep(0.2)
        log = deployment.log("web.log")
        assert "InvalidToken" not in log and "Traceback" not in log
        assert "secrets: Provider 'sealed'" in log, log
        assert "secrets: Provider 'unset-env'" in log and "secrets: Provider 'empty-env'" in log
        assert "secrets: Alert webhook 'ops'" in log  # its signing secret is sealed under K1 too
    finally:
        _stop(deployment, web)

    # Listed again behind the new key: the dry run says what it would do and changes nothing.
    deployment.env["GATEWAY_ENCRYPTION_KEY"] = f"{K2},{K1}"
    before = deployment.rows("SELECT api_key_encrypted FROM responses_api_provider WHERE name = 'sealed'")
    dry = deployment.manage("reseal_secrets", "--dry-run")
    assert "would re-seal: provider 'sealed' API key" in dry and "2 would re-seal" in dry, dry
    assert "would re-seal: alert webhook 'ops' secret" in dry, dry
    assert deployment.rows("SELECT api_key_encrypted FROM responses_api_provider WHERE name = 'sealed'") == before
    done = deployment.manage("reseal_secrets")
    assert "re-sealed: provider 'sealed' API key" in done, done
    assert "re-sealed: alert webhook 'ops' secret" in done, done
    assert "0 re-sealed" in deployment.manage("reseal_secrets")  # nothing left to do

    deployment.env["GATEWAY_ENCRYPTION_KEY"] = K2  # K1 may go now
    after = deployment.manage("reseal_secrets", "--dry-run")  # K2 alone opens everything
    assert "0 would re-seal, 2 already under the first key, 0 no listed key opens" in after, after
    web = deployment.start_web()
    try:
        answered = _create(deployment, "m")
        assert answered.status_code == 200, answered.text
    finally:
        _stop(deployment, web)


def test_a_provider_key_variable_unset_or_empty_is_a_503_counted_with_its_model(deployment: Deployment) -> None:
    deployment.env["GATEWAY_ENCRYPTION_KEY"] = K2
    web = deployment.start_web()
    try:
        for model, provider, state in (("e", "unset-env", "not set"), ("z", "empty-env", "empty")):
            refused = _create(deployment, model)
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["code"] == "provider_misconfigured"
            assert f"'{provider}'" in error["message"] and state in error["message"]
        text = httpx.get(f"{deployment.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
        assert value(text, "gateway_requests_total", model="e", status="503") == 1, text
        assert value(text, "gateway_requests_total", model="z", status="503") == 1, text
    finally:
        _stop(deployment, web)
