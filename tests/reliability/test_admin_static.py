"""The admin with DEBUG=0 on a real uvicorn process, before and after `collectstatic`: without
it the login page and its stylesheet are served (the files unhashed, from the installed apps)
and the log says what to run, not a 500 "Missing staticfiles manifest entry"; after it, the
hashed names of the manifest."""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.reliability.deployment import temporary_deployment
from tests.support.servers import find_postgres_bindir, find_redis_server
from tests.support.upstream import ScriptedUpstream

try:
    find_postgres_bindir(), find_redis_server()
except Exception:  # noqa: BLE001 - no binaries, whatever the finder raises: skip
    pytest.skip("PostgreSQL and Redis binaries are needed", allow_module_level=True)


def _stylesheet(deployment_url: str) -> tuple[str, int]:
    page = httpx.get(f"{deployment_url}/admin/login/", timeout=30)
    assert page.status_code == 200, page.text[:2000]
    (href,) = re.findall(r'href="(/static/admin/css/base[^"]*\.css)"', page.text)
    return href, httpx.get(f"{deployment_url}{href}", timeout=30).status_code


def test_the_admin_works_before_and_after_collectstatic() -> None:
    static_root = Path(tempfile.mkdtemp(prefix="gateway-static-"))
    try:
        _before_and_after(static_root)
    finally:
        shutil.rmtree(static_root, ignore_errors=True)


def _before_and_after(static_root: Path) -> None:
    with (
        ScriptedUpstream() as upstream,
        temporary_deployment(
            upstream.base_url, prefix="gateway-admin-static-", env={"STATIC_ROOT": str(static_root)}
        ) as deployment,
    ):
        web = deployment.start_web()
        href, status = _stylesheet(deployment.url)
        assert href == "/static/admin/css/base.css" and status == 200
        assert "collectstatic --noinput" in deployment.log("web.log")
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(20)
        deployment.processes.remove(web)

        deployment.manage("collectstatic", "--noinput", "--verbosity", "0")
        assert (static_root / "staticfiles.json").exists()
        deployment.start_web()
        href, status = _stylesheet(deployment.url)
        assert re.fullmatch(r"/static/admin/css/base\.[0-9a-f]{12}\.css", href) and status == 200
