"""/metrics from one definition: one process or many list the same families, and processes
that share a metrics directory (web and worker containers, each with pid namespaces of
their own) never write into each other's files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]

# Runs /metrics' exposition in a fresh interpreter (the multi-process value class is chosen at import),
# against a migrated SQLite file, after counting nothing at all.
_EXPOSE = """
import django, sys
django.setup()
from responses_api.api.health import BackgroundQueue
from responses_api.observability.metrics import exposition
sys.stdout.write(exposition(BackgroundQueue())[0].decode())
"""


def _families(tmp_path: Path, sqlite: Path, multiproc: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "PROMETHEUS_", "DATABASE_", "REDIS_"))}
    env |= {"DJANGO_SETTINGS_MODULE": "project.settings", "DEBUG": "1", "DATABASE_URL": f"sqlite:///{sqlite}"}
    if multiproc is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc)
    out = subprocess.run(
        [sys.executable, "-c", _EXPOSE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    return {family.name: family.type for family in text_string_to_metric_families(out)}


def test_one_process_and_many_expose_the_same_families(tmp_path: Path) -> None:
    sqlite = tmp_path / "db.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "PROMETHEUS_", "DATABASE_", "REDIS_"))}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env | {"DEBUG": "1", "DATABASE_URL": f"sqlite:///{sqlite}"},
        check=True,
        timeout=180,
    )
    single = _families(tmp_path, sqlite, None)
    (tmp_path / "prometheus").mkdir()
    many = _families(tmp_path, sqlite, tmp_path / "prometheus")
    assert single == many
    assert {
        "gateway_requests",
        "gateway_rate_limited",
        "gateway_upstream_errors",
        "gateway_open_streams",
        "gateway_open_websockets",
        "gateway_background_queued",
    } <= set(single)


def test_the_grafana_dashboard_shows_every_metric_family() -> None:
    import json

    from responses_api.observability.metrics import METRICS

    dashboard = json.dumps(json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text()))
    for metric in METRICS:
        assert metric._name in dashboard, f"{metric._name} has no panel"


# Counts in the shared directory, then (second argument) either ends as a process does or
# stays, with its open-stream gauge up, until its stdin closes.
_COUNT = """
import sys, time
from pathlib import Path
from responses_api.observability import metrics
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
for _ in range(int(sys.argv[3])):
    metrics.rate_limited("tenant_rpm")
metrics.OPEN_STREAMS.inc()
print(metrics.process_identifier(), flush=True)
if sys.argv[2] == "exit":
    metrics.process_exit()
else:
    sys.stdin.read()
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_two_containers_with_the_same_pid_share_a_metrics_directory(tmp_path: Path) -> None:
    """Two processes that both have pid 1, in their own pid and UTS namespaces (what two
    containers are), count into one directory at the same time: no count is lost, and one
    of them ending does not drop the other's live gauge."""
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--uts", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"no user namespaces here: {probe.stderr.decode().strip()}")
    shared, go, n = tmp_path / "prometheus", tmp_path / "go", 20000
    shared.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "PROMETHEUS_"))}
    env |= {"PROMETHEUS_MULTIPROC_DIR": str(shared), "PYTHONPATH": str(ROOT)}

    def container(hostname: str, mode: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                "unshare",
                "--user",
                "--map-root-user",
                "--pid",
                "--fork",
                "--uts",
                "sh",
                "-c",
                f'hostname {hostname} && exec "$0" -c "$1" "$2" "$3" "$4"',
                sys.executable,
                textwrap.dedent(_COUNT),
                str(go),
                mode,
                str(n),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    web, worker = container("web", "stay"), container("worker", "exit")
    try:
        time.sleep(1.5)  # both imported and waiting
        go.touch()
        assert worker.stdout is not None and web.stdout is not None
        identities = {web.stdout.readline().strip(), worker.stdout.readline().strip()}
        # pid 1 in both, told apart by host name (and a random part: a pid is reused later)
        assert {identity.rsplit("-", 1)[0] for identity in identities} == {"web-1", "worker-1"}
        assert worker.wait(30) == 0

        families = {f.name: f for f in MultiProcessCollector(None, path=str(shared)).collect()}
        refused = sum(s.value for s in families["gateway_rate_limited"].samples if s.name.endswith("_total"))
        assert refused == 2 * n
        # The worker ended (its live gauge gone), the web process still holds its stream open.
        assert sum(s.value for s in families["gateway_open_streams"].samples) == 1
    finally:
        for proc in (web, worker):
            if proc.stdin:
                proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
