"""This process among the gateway's processes sharing a database and a metrics directory:
host:pid:random (containers sharing a database may reuse pids, and a restarted process is a
new one). Liveness beats with it, a stream's row names its web process with it
(`served_by`), the metrics files are named after it."""

from __future__ import annotations

import os
import secrets
import socket

_id: tuple[int, str] | None = None


def process_id() -> str:
    """This process, among the web processes sharing a database (liveness.py's beat, a
    stream's `served_by`): host:pid:random."""
    global _id
    pid = os.getpid()
    if _id is None or _id[0] != pid:  # a forked child is a process of its own
        _id = (pid, f"{socket.gethostname()[:80]}:{pid}:{secrets.token_hex(4)}")
    return _id[1]
