"""The shared metrics directory is never emptied by a deployment step (compose's `migrate`
did, at every `docker compose up`): each process holds a lock of its own there while it lives,
and a process starting archives the files of those that ended. Real processes, real files:
one killed outright, one that ended, one alive, one of a version that kept no lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector

ROOT = Path(__file__).resolve().parents[2]

# Counts `n` refusals and opens a stream, says its id, then ends as told: "exit" (as a process
# ends), "stay" (until its stdin closes) or "hang" (until killed).
_COUNT = """
import sys
from responses_api.observability import metrics
for _ in range(int(sys.argv[2])):
    metrics.rate_limited("tenant_rpm")
metrics.LATENCY.labels("v1/responses").observe(0.2)
metrics.OPEN_STREAMS.inc()
print(metrics.process_identifier(), flush=True)
if sys.argv[1] == "exit":
    metrics.process_exit()
elif sys.argv[1] == "stay":
    sys.stdin.read()
else:
    import time
    time.sleep(600)
"""


def _start(shared: Path, mode: str, n: int) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "PROMETHEUS_"))}
    env |= {"PROMETHEUS_MULTIPROC_DIR": str(shared), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_COUNT), mode, str(n)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def _sums(shared: Path) -> tuple[float, float, float]:
    families = {f.name: f for f in MultiProcessCollector(None, path=str(shared)).collect()}
    refused = sum(s.value for s in families["gateway_rate_limited"].samples if s.name.endswith("_total"))
    streams = sum(s.value for s in families["gateway_open_streams"].samples)
    observed = sum(s.value for s in families["gateway_request_duration_seconds"].samples if s.name.endswith("_count"))
    return refused, streams, observed


def _ids(shared: Path) -> set[str]:
    return {name.removesuffix(".db").rsplit("_", 1)[-1] for name in os.listdir(shared) if name.endswith(".db")}


def test_a_starting_process_archives_the_files_of_ended_ones(tmp_path: Path) -> None:
    shared = tmp_path / "prometheus"
    shared.mkdir()
    # An earlier version's process: files, no lock.
    legacy = MmapedDict(str(shared / "counter_oldhost-7-0badc0de.db"))
    legacy.write_value(
        mmap_key("gateway_rate_limited", "gateway_rate_limited_total", ["limit"], ["tenant_rpm"], "x"), 5.0, 0.0
    )
    legacy.close()

    alive, alive_id = _start(shared, "stay", 100)
    assert _ids(shared) == {alive_id, "archive"}  # the lockless files: archived at its start
    killed, killed_id = _start(shared, "hang", 20)
    ended, ended_id = _start(shared, "exit", 3)
    try:
        assert ended.wait(30) == 0
        killed.send_signal(signal.SIGKILL)  # no process_exit: its open stream stays in its file
        killed.wait(30)
        assert _sums(shared) == (128, 2, 3)  # the killed process's stream still counted
        assert {alive_id, killed_id, ended_id} <= _ids(shared)

        newcomer, newcomer_id = _start(shared, "exit", 1)  # starting, it sweeps
        assert newcomer.wait(30) == 0
        # The ended processes' counts are in the archive: nothing lost, nothing counted twice;
        # the killed one's open stream is gone; the live one's files and lock are untouched.
        assert _ids(shared) == {alive_id, newcomer_id, "archive"}
        assert _sums(shared) == (129, 1, 4)
        locks = {name for name in os.listdir(shared) if name.startswith("proc_")}
        assert locks == {f"proc_{alive_id}.lock", f"proc_{newcomer_id}.lock"}

        # The next start adds the newcomer into the same archive: the sums still never go down.
        again, again_id = _start(shared, "exit", 0)
        assert again.wait(30) == 0
        assert _ids(shared) == {alive_id, again_id, "archive"}
        assert _sums(shared) == (129, 1, 5)
    finally:
        for proc in (alive, killed, ended):
            if proc.stdin:
                proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _dead_counter(shared: Path, ident: str, value: float) -> None:
    dead = MmapedDict(str(shared / f"counter_{ident}.db"))
    dead.write_value(
        mmap_key("gateway_rate_limited", "gateway_rate_limited_total", ["limit"], ["tenant_rpm"], "x"), value, 0.0
    )
    dead.close()


def _refused(shared: Path) -> float:
    families = {f.name: f for f in MultiProcessCollector(None, path=str(shared)).collect()}
    return sum(s.value for s in families["gateway_rate_limited"].samples if s.name.endswith("_total"))


@pytest.mark.parametrize("dies", ["before its commit", "after its commit"])
def test_a_sweep_that_died_half_way_is_finished_or_undone_by_the_next(dies: str, tmp_path: Path, monkeypatch) -> None:
    """A count is never left in both the archive and its file (counted twice for ever), nor in
    neither: the next sweep reads the journal the dead one left."""
    from responses_api.observability import metrics

    shared = tmp_path / "prometheus"
    shared.mkdir()
    _dead_counter(shared, "old-1-aa", 7)
    metrics.sweep_dead(str(shared))  # an archive already there: 7
    _dead_counter(shared, "old-2-bb", 5)

    class Died(Exception):
        pass

    if dies == "before its commit":
        real_replace = os.replace

        def replace(src: str, dst: str) -> None:
            if str(dst).endswith("_archive.db"):
                raise Died
            real_replace(src, dst)

        monkeypatch.setattr(metrics.os, "replace", replace)  # type: ignore[attr-defined]  # the module's own name, patched where it is looked up
    else:

        def absorbed(directory: str, journal: str) -> None:
            raise Died

        monkeypatch.setattr(metrics, "_absorbed", absorbed)
    with pytest.raises(Died):
        metrics.sweep_dead(str(shared))
    monkeypatch.undo()
    assert (shared / "counter.journal").exists()
    metrics.sweep_dead(str(shared))
    assert _refused(shared) == 12
    assert sorted(name for name in os.listdir(shared) if not name.endswith(".lock")) == ["counter_archive.db"]


# A Celery prefork parent: it claims its id at import, forks a child that counts and ends, and
# sweeps (as its next child's start would): the child's counts are archived, its own files stay.
_FORK = """
import os, sys
from responses_api.observability import metrics
metrics.rate_limited("tenant_rpm")
child = os.fork()
if child == 0:
    metrics.rate_limited("tenant_rpm")
    metrics.rate_limited("tenant_rpm")
    print(metrics.process_identifier(), flush=True)
    os._exit(0)
os.waitpid(child, 0)
print(sorted(metrics.sweep_dead(os.environ["PROMETHEUS_MULTIPROC_DIR"])), metrics.process_identifier(), flush=True)
"""


def test_a_forked_child_claims_an_id_of_its_own_and_its_end_frees_only_it(tmp_path: Path) -> None:
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "PROMETHEUS_"))}
    env |= {"PROMETHEUS_MULTIPROC_DIR": str(shared), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FORK)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    child_id, parent_line = out.stdout.strip().splitlines()
    swept, parent_id = parent_line.rsplit(" ", 1)
    assert swept == repr([child_id]) and child_id != parent_id
    assert _ids(shared) == {parent_id, "archive"}  # the parent ended since: its files wait for the next start
    assert _refused(shared) == 3
