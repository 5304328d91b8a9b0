"""The test suite's threaded HTTP servers on loopback (tool webhooks, a moderation endpoint)."""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class LoopbackHTTPServer(ThreadingHTTPServer):
    """`ThreadingHTTPServer` with room for the connections a test opens at once.

    socketserver listens with a backlog of 5, and its one accepting thread shares the GIL with
    the gateway's and the upstream's threads in the test process: twenty runs calling a tool
    together overflowed the queue (the kernel's TcpExtListenOverflows grew by four over five
    runs of test_kill_9_of_a_worker_holding_many_runs), and a dropped connection is retried by the
    client's TCP after 1, 2, 4, 8, 16 s... On a loaded machine one call never arrived within the
    test's minute (CI, "19 of 20 tools called")."""

    request_queue_size = 128
    daemon_threads = True
