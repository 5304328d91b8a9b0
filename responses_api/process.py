"""This process's identity: host name, pid and a random part.

Containers that share a database or a metrics directory can share pids (each has its own pid
namespace), and a pid is reused later on one host by another process: the host name tells the
containers apart and the random part the successive processes. Used by the web processes'
liveness rows (orchestration/liveness.py), a stream's `served_by` (orchestration/assembly.py) and the
names of their metrics files (observability/metrics.py);
it imports nothing of the gateway, so any layer may use it.
"""

from __future__ import annotations

import os
import secrets
import socket

_id: tuple[int, str] | None = None


def process_id() -> str:
    global _id
    pid = os.getpid()
    if _id is None or _id[0] != pid:  # a forked child is a process of its own
        _id = (pid, f"{socket.gethostname()[:80]}:{pid}:{secrets.token_hex(4)}")
    return _id[1]
