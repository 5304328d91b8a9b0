"""SSRF defences of tool_registry.egress, against real loopback listeners.

Canary servers are real TCP listeners on loopback that count accepted connections: a refused
URL must raise EgressDenied *and* leave the canary at zero. Each refused loopback URL also has
a control run with a permissive policy showing the same URL really does reach the canary, so
a zero means "blocked", not "unreachable anyway". Only the resolver (socket.getaddrinfo) is
faked, to map test names onto loopback; connections are real. No Django, no database.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json as jsonlib
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tool_registry.egress import (
    EgressDenied,
    EgressPolicy,
    EgressResolutionError,
    check_url_sync,
    denial_reason,
    embedded_ipv4,
    literal_address,
    parse_url,
    resolve_checked,
    send_checked,
)

pytestmark = pytest.mark.embedded

TIMEOUT = 3.0
NOTHING_ALLOWED = EgressPolicy()


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Override the autouse cache reset in tests/conftest.py: it imports Django models."""
    yield


# --------------------------------------------------------------------------------------------
# Loopback servers
# --------------------------------------------------------------------------------------------


@dataclass
class Route:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay: float = 0.0


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackServer

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.seen.append(Seen(self.command, self.path, headers, body))
        route = self.server.routes.get(self.path.split("?")[0], Route())
        if route.delay:
            time.sleep(route.delay)
        self.send_response(route.status)
        for name, value in route.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(route.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(route.body)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _handle  # noqa: N815 - BaseHTTPRequestHandler's method names

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


class LoopbackServer(ThreadingHTTPServer):
    """Minimal HTTP server that counts every accepted TCP connection."""

    daemon_threads = True

    def __init__(self, host: str, port: int = 0) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.connections = 0
        self._lock = threading.Lock()
        self.routes: dict[str, Route] = {}
        self.seen: list[Seen] = []
        super().__init__((host, port), _Handler)
        self.host = host
        self.port: int = self.server_address[1]
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def get_request(self) -> tuple[socket.socket, Any]:
        request = super().get_request()  # counted at accept(): before any HTTP is parsed
        with self._lock:
            self.connections += 1
        return request

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (the timeout test) leaves a broken pipe: expected, keep quiet.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., LoopbackServer]]:
    servers: list[LoopbackServer] = []

    def start(host: str, port: int = 0) -> LoopbackServer:
        try:
            server = LoopbackServer(host, port)
        except OSError as exc:
            pytest.skip(f"cannot listen on {host}:{port} here: {exc}")
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def canary(serve: Callable[..., LoopbackServer]) -> LoopbackServer:
    return serve("127.0.0.1")


@pytest.fixture
def canary6(serve: Callable[..., LoopbackServer]) -> LoopbackServer:
    return serve("::1")  # skips if IPv6 loopback is unavailable


async def assert_untouched(*servers: LoopbackServer) -> None:
    # A connection that slipped through would be accepted by the server thread a moment later.
    await asyncio.sleep(0.05)
    for server in servers:
        assert server.connections == 0, f"{server.host}:{server.port} was reached"


# --------------------------------------------------------------------------------------------
# Resolver (the one faked boundary) and a spy on outgoing requests
# --------------------------------------------------------------------------------------------


class FakeDNS:
    """socket.getaddrinfo for *.test names; everything else goes to the real resolver."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.answers: dict[str, Callable[[int], list[str]]] = {}
        self.calls: dict[str, int] = {}

    def set(self, name: str, *addresses: str) -> None:
        self.answers[name] = lambda _n: list(addresses)

    def sequence(self, name: str, first: list[str], later: list[str]) -> None:
        self.answers[name] = lambda n: first if n == 1 else later

    def __call__(self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in self.answers:
            if name.endswith((".test", ".example")):
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return self.real(host, port, family, type, proto, flags)
        self.calls[name] = self.calls.get(name, 0) + 1
        infos: list[
            tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[str, int] | tuple[str, int, int, int]]
        ] = []
        for text in self.answers[name](self.calls[name]):
            if ":" in text:
                infos.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (text, int(port or 0), 0, 0)))
            else:
                infos.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (text, int(port or 0))))
        return infos


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDNS:
    fake = FakeDNS(socket.getaddrinfo)
    # loop.getaddrinfo looks up socket.getaddrinfo at call time, so this covers async and sync.
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """Every request handed to an httpx client: a refused URL must not even get this far."""
    requests: list[httpx.Request] = []
    original = httpx.AsyncClient.send

    async def spy(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        requests.append(request)
        return await original(self, request, **kwargs)

    monkeypatch.setattr(httpx.AsyncClient, "send", spy)
    return requests


# --------------------------------------------------------------------------------------------
# Refused targets: zero connections
# --------------------------------------------------------------------------------------------

# (url template, which canary it would reach); {p4} = 127.0.0.1 canary, {p6} = ::1 canary.
LOOPBACK_TARGETS = [
    ("http://127.0.0.1:{p4}/", "v4"),
    ("http://0.0.0.0:{p4}/", "v4"),
    ("http://[::ffff:127.0.0.1]:{p4}/", "v4"),
    ("http://[::ffff:7f00:1]:{p4}/", "v4"),
    ("http://2130706433:{p4}/", "v4"),
    ("http://0177.0.0.1:{p4}/", "v4"),
    ("http://0x7f000001:{p4}/", "v4"),
    ("http://0x7f.1:{p4}/", "v4"),
    ("http://127.1:{p4}/", "v4"),
    ("http://LOCALHOST:{p4}/", "v4"),
    ("http://evil.test:{p4}/", "v4"),  # resolver maps it to 127.0.0.1
    ("http://[::1]:{p6}/", "v6"),
]

PERMISSIVE = EgressPolicy.from_strings(["127.0.0.0/8", "::1", "0.0.0.0/32", "evil.test", "localhost"])


def _target(template: str, which: str, request: pytest.FixtureRequest) -> tuple[str, LoopbackServer]:
    server: LoopbackServer = request.getfixturevalue("canary6" if which == "v6" else "canary")
    return template.format(p4=server.port, p6=server.port), server


@pytest.mark.parametrize(("template", "which"), LOOPBACK_TARGETS)
async def test_loopback_targets_are_refused_without_connecting(
    template: str,
    which: str,
    request: pytest.FixtureRequest,
    dns: FakeDNS,
    sent: list[httpx.Request],
) -> None:
    dns.set("evil.test", "127.0.0.1")
    url, server = _target(template, which, request)
    with pytest.raises(EgressDenied) as caught:
        await send_checked("POST", url, policy=NOTHING_ALLOWED, json={"x": 1}, timeout=TIMEOUT)
    assert "refusing" in str(caught.value)
    assert sent == []
    await assert_untouched(server)


@pytest.mark.parametrize(("template", "which"), LOOPBACK_TARGETS)
async def test_control_same_targets_reach_the_canary_when_allowlisted(
    template: str, which: str, request: pytest.FixtureRequest, dns: FakeDNS
) -> None:
    # Proves each refused URL above really addresses the canary: zero there means blocked.
    dns.set("evil.test", "127.0.0.1")
    url, server = _target(template, which, request)
    response = await send_checked("GET", url, policy=PERMISSIVE, timeout=TIMEOUT)
    assert response.status_code == 200 and response.content == b"ok"
    assert server.connections == 1


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://192.168.1.1/",
        "http://172.16.0.1/",
        "http://100.64.0.1/",
        "http://100.100.100.200/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://[fe80::1]/",
        "http://[fec0::1]/",
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
        "http://0xa9fea9fe/",  # 169.254.169.254, hex
        "http://metadata.test/",  # resolver maps it to 169.254.169.254
    ],
)
async def test_unreachable_internal_targets_are_refused_before_connecting(
    url: str, dns: FakeDNS, sent: list[httpx.Request], canary: LoopbackServer
) -> None:
    dns.set("metadata.test", "169.254.169.254")
    started = time.monotonic()
    with pytest.raises(EgressDenied):
        await send_checked("GET", url, policy=NOTHING_ALLOWED, timeout=TIMEOUT)
    # Refused up front: no request built, no connect attempt (which would time out or fail).
    # The bound is the connect timeout a blackholed address would wait out, not a guess at
    # the machine's speed (1 s was one: a loaded machine can take that to raise).
    assert sent == []
    assert time.monotonic() - started < TIMEOUT
    await assert_untouched(canary)


async def test_metadata_message_names_host_and_reason() -> None:
    with pytest.raises(EgressDenied) as caught:
        await send_checked(
            "GET",
            "http://169.254.169.254/latest/meta-data/",
            policy=NOTHING_ALLOWED,
            timeout=TIMEOUT,
        )
    assert "169.254.169.254" in str(caught.value) and "metadata" in str(caught.value)
    assert caught.value.address == ipaddress.ip_address("169.254.169.254")


async def test_every_resolved_address_must_pass(
    dns: FakeDNS, canary: LoopbackServer, sent: list[httpx.Request]
) -> None:
    # A public address first does not excuse a loopback one later: the connector may use either.
    dns.set("mixed.test", "93.184.216.34", "127.0.0.1")
    with pytest.raises(EgressDenied, match="127.0.0.1"):
        await send_checked("GET", f"http://mixed.test:{canary.port}/", policy=NOTHING_ALLOWED, timeout=TIMEOUT)
    assert sent == []
    await assert_untouched(canary)


async def test_unresolvable_host_is_refused(dns: FakeDNS) -> None:
    with pytest.raises(EgressResolutionError, match="nowhere.test"):
        await send_checked("GET", "http://nowhere.test/", policy=NOTHING_ALLOWED, timeout=TIMEOUT)


# --------------------------------------------------------------------------------------------
# Redirects
# --------------------------------------------------------------------------------------------


@pytest.fixture
def loop2(serve: Callable[..., LoopbackServer]) -> LoopbackServer:
    """A canary on 127.0.0.2: loopback, but outside an allowlist of 127.0.0.1/32."""
    return serve("127.0.0.2")


ONLY_B = EgressPolicy.from_strings(["127.0.0.1/32"])


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.2:{c}/",
        "http://[::ffff:127.0.0.2]:{c}/",
        "http://2130706434:{c}/",  # 127.0.0.2
        "http://evil.test:{c}/",  # resolver maps it to 127.0.0.2
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "file:///etc/passwd",
        "http://user@127.0.0.1:{b}/",
    ],
)
async def test_redirect_targets_are_rechecked(
    location: str, serve: Callable[..., LoopbackServer], loop2: LoopbackServer, dns: FakeDNS
) -> None:
    dns.set("evil.test", "127.0.0.2")
    b = serve("127.0.0.1")
    b.routes["/go"] = Route(302, {"Location": location.format(c=loop2.port, b=b.port)})
    with pytest.raises(EgressDenied):
        await send_checked("POST", f"http://127.0.0.1:{b.port}/go", policy=ONLY_B, json={}, timeout=TIMEOUT)
    assert b.connections == 1  # the allowlisted server was reached...
    await assert_untouched(loop2)  # ...its redirect target was not


async def test_control_loop2_is_reachable(loop2: LoopbackServer) -> None:
    response = await send_checked(
        "GET",
        f"http://127.0.0.2:{loop2.port}/",
        policy=EgressPolicy.from_strings(["127.0.0.2"]),
        timeout=TIMEOUT,
    )
    assert response.status_code == 200 and loop2.connections == 1


async def test_relative_redirect_and_303_becomes_get(serve: Callable[..., LoopbackServer]) -> None:
    b = serve("127.0.0.1")
    b.routes["/a/start"] = Route(303, {"Location": "../landing?x=1"})  # relative to /a/start
    b.routes["/landing"] = Route(200, {"Content-Type": "application/json"}, b'{"done": true}')
    response = await send_checked(
        "POST",
        f"http://127.0.0.1:{b.port}/a/start",
        policy=ONLY_B,
        json={"secret": 1},
        timeout=TIMEOUT,
    )
    assert response.json() == {"done": True}
    assert [(s.method, s.path) for s in b.seen] == [("POST", "/a/start"), ("GET", "/landing?x=1")]
    assert b.seen[1].body == b"" and "content-type" not in b.seen[1].headers


@pytest.mark.parametrize("status", [301, 302])
async def test_301_302_become_get_without_body(status: int, serve: Callable[..., LoopbackServer]) -> None:
    b = serve("127.0.0.1")
    b.routes["/old"] = Route(status, {"Location": "/new"})
    response = await send_checked(
        "POST", f"http://127.0.0.1:{b.port}/old", policy=ONLY_B, content=b"payload", timeout=TIMEOUT
    )
    assert response.status_code == 200
    assert [(s.method, s.body) for s in b.seen] == [("POST", b"payload"), ("GET", b"")]


@pytest.mark.parametrize("status", [307, 308])
async def test_307_308_keep_method_and_body(status: int, serve: Callable[..., LoopbackServer]) -> None:
    b = serve("127.0.0.1")
    b.routes["/old"] = Route(status, {"Location": f"http://127.0.0.1:{b.port}/new"})
    response = await send_checked(
        "POST", f"http://127.0.0.1:{b.port}/old", policy=ONLY_B, json={"a": 1}, timeout=TIMEOUT
    )
    assert response.status_code == 200
    assert [(s.method, s.path) for s in b.seen] == [("POST", "/old"), ("POST", "/new")]
    assert jsonlib.loads(b.seen[1].body) == {"a": 1}
    assert b.seen[1].headers["content-type"] == "application/json"


async def test_redirect_limit(serve: Callable[..., LoopbackServer]) -> None:
    b = serve("127.0.0.1")
    b.routes["/loop"] = Route(302, {"Location": "/loop"})
    with pytest.raises(httpx.TooManyRedirects):
        await send_checked(
            "GET",
            f"http://127.0.0.1:{b.port}/loop",
            policy=ONLY_B,
            timeout=TIMEOUT,
            max_redirects=2,
        )
    assert b.connections == 3  # the first request plus two followed redirects


async def test_redirect_response_without_location_is_returned(
    serve: Callable[..., LoopbackServer],
) -> None:
    b = serve("127.0.0.1")
    b.routes["/x"] = Route(302, {}, b"no location")
    response = await send_checked("GET", f"http://127.0.0.1:{b.port}/x", policy=ONLY_B, timeout=TIMEOUT)
    assert response.status_code == 302 and response.content == b"no location"


# --------------------------------------------------------------------------------------------
# Resolve once, connect to what was checked (DNS rebinding)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def twin_servers(serve: Callable[..., LoopbackServer]) -> tuple[LoopbackServer, LoopbackServer]:
    """B on 127.0.0.1:P and a canary on 127.0.0.2:P: same port, so a re-resolution that lands on
    127.0.0.2 would really connect to the canary."""
    for _ in range(20):
        b = serve("127.0.0.1")
        try:
            return b, LoopbackServer("127.0.0.2", b.port)
        except OSError:
            continue
    pytest.skip("could not bind 127.0.0.1:P and 127.0.0.2:P")


async def test_dns_rebinding_connects_to_the_checked_address(
    twin_servers: tuple[LoopbackServer, LoopbackServer], dns: FakeDNS
) -> None:
    b, twin = twin_servers
    try:
        dns.sequence("rebind.test", first=["127.0.0.1"], later=["127.0.0.2"])
        response = await send_checked(
            "POST",
            f"http://rebind.test:{b.port}/hook",
            policy=ONLY_B,
            json={"k": "v"},
            timeout=TIMEOUT,
        )
        assert response.status_code == 200
        assert dns.calls["rebind.test"] == 1  # resolved exactly once
        assert b.connections == 1
        assert b.seen[0].headers["host"] == f"rebind.test:{b.port}"  # name kept for the server
        await assert_untouched(twin)
    finally:
        twin.stop()


async def test_dns_rebinding_between_redirect_hops_is_caught(
    twin_servers: tuple[LoopbackServer, LoopbackServer], dns: FakeDNS
) -> None:
    b, twin = twin_servers
    try:
        b.routes["/hop"] = Route(302, {"Location": "/after"})
        dns.sequence("rebind.test", first=["127.0.0.1"], later=["127.0.0.2"])
        with pytest.raises(EgressDenied, match="127.0.0.2"):
            await send_checked("GET", f"http://rebind.test:{b.port}/hop", policy=ONLY_B, timeout=TIMEOUT)
        assert dns.calls["rebind.test"] == 2  # once per hop
        assert b.connections == 1
        await assert_untouched(twin)
    finally:
        twin.stop()


# --------------------------------------------------------------------------------------------
# Allowlist
# --------------------------------------------------------------------------------------------


async def test_allowlisted_hostname_and_wildcard(serve: Callable[..., LoopbackServer], dns: FakeDNS) -> None:
    b = serve("127.0.0.1")
    dns.set("tools.corp.test", "127.0.0.1")
    dns.set("deep.tools.corp.test", "127.0.0.1")
    dns.set("corp.test", "127.0.0.1")
    dns.set("exact.test", "127.0.0.1")
    policy = EgressPolicy.from_strings(["*.corp.test", "EXACT.test."])
    for name in ("tools.corp.test", "deep.tools.corp.test", "exact.test", "Exact.Test"):
        response = await send_checked("GET", f"http://{name}:{b.port}/", policy=policy, timeout=TIMEOUT)
        assert response.status_code == 200
    assert b.connections == 4
    with pytest.raises(EgressDenied, match="corp.test"):  # the wildcard covers subdomains only
        await send_checked("GET", f"http://corp.test:{b.port}/", policy=policy, timeout=TIMEOUT)
    with pytest.raises(EgressDenied):  # a hostname entry never allows an IP literal
        await send_checked("GET", f"http://127.0.0.1:{b.port}/", policy=policy, timeout=TIMEOUT)
    assert b.connections == 4


async def test_connect_falls_back_to_next_checked_address(serve: Callable[..., LoopbackServer], dns: FakeDNS) -> None:
    b = serve("127.0.0.1")
    if not _can_bind("127.0.0.3", b.port):
        pytest.skip("127.0.0.3 unusable here")
    # Nothing listens on 127.0.0.3:P, so the first checked address refuses the connection.
    dns.set("multi.test", "127.0.0.3", "127.0.0.1")
    response = await send_checked(
        "GET",
        f"http://multi.test:{b.port}/",
        policy=EgressPolicy.from_strings(["127.0.0.0/8"]),
        timeout=TIMEOUT,
    )
    assert response.status_code == 200 and b.connections == 1


def _can_bind(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
            return True
        except OSError:
            return False


def test_policy_validation() -> None:
    policy = EgressPolicy.from_strings(
        [
            " Tools.Example.com ",
            "*.corp.example",
            "10.0.0.5",
            "[fd00::5]",
            "10.1.2.3/16",
            "",
            "bücher.example",
        ]
    )
    assert policy.allow == (
        "tools.example.com",
        "*.corp.example",
        "10.0.0.5",
        "fd00::5",
        "10.1.0.0/16",
        "xn--bcher-kva.example",
    )
    for bad in [
        "*",
        "*.",
        "a.*.example",
        "foo*.example",
        "exa mple.com",
        "host:0",
        "host:70000",
        "10.0.0.0/33",
        "127.1:80",
        "127.1",
        "0x7f000001",
        "300.1.1.1",
        "-bad.example",
        "fe80::1%eth0",
    ]:
        with pytest.raises(ValueError, match="invalid egress allowlist entry"):
            EgressPolicy.from_strings([bad])
    assert EgressPolicy.from_strings("10.0.0.5").allow == ("10.0.0.5",)


def test_policy_matching() -> None:
    policy = EgressPolicy.from_strings(["*.corp.example", "api.example.com", "10.0.0.0/8", "fd00::/8"])
    assert policy.host_allowed("a.corp.example") and policy.host_allowed("A.B.Corp.Example.")
    assert not policy.host_allowed("corp.example") and not policy.host_allowed("evilcorp.example")
    assert policy.host_allowed("API.example.com.") and not policy.host_allowed("x.api.example.com")
    assert policy.address_allowed(ipaddress.ip_address("10.9.8.7"))
    assert policy.address_allowed(ipaddress.ip_address("::ffff:10.9.8.7"))  # same host on the wire
    assert not policy.address_allowed(ipaddress.ip_address("64:ff9b::a09:807"))  # via a translator
    assert policy.address_allowed(ipaddress.ip_address("fd12::1"))
    assert not policy.address_allowed(ipaddress.ip_address("11.0.0.1"))


def test_policy_entries_with_a_port_allow_that_port_only() -> None:
    policy = EgressPolicy.from_strings(
        ["MCP.Internal:8443", "*.svc.example:80", "10.0.0.5:8080", "10.1.0.0/16:443", "[FD00::5]:8080", "fd00::6"]
    )
    assert policy.allow == (
        "mcp.internal:8443",
        "*.svc.example:80",
        "10.0.0.5:8080",
        "10.1.0.0/16:443",
        "[fd00::5]:8080",
        "fd00::6",
    )
    assert policy.host_allowed("mcp.internal", 8443)
    assert not policy.host_allowed("mcp.internal", 8444) and not policy.host_allowed("mcp.internal")
    assert policy.host_allowed("a.svc.example", 80) and not policy.host_allowed("a.svc.example", 6379)
    ip = ipaddress.ip_address
    assert policy.address_allowed(ip("10.0.0.5"), 8080) and not policy.address_allowed(ip("10.0.0.5"), 22)
    assert policy.address_allowed(ip("10.1.2.3"), 443) and not policy.address_allowed(ip("10.1.2.3"), 5432)
    assert policy.address_allowed(ip("fd00::5"), 8080) and not policy.address_allowed(ip("fd00::5"), 80)
    assert policy.address_allowed(ip("fd00::6"), 1) and policy.address_allowed(ip("fd00::6"))  # no port: any


async def test_a_port_entry_refuses_other_ports_of_the_host() -> None:
    policy = EgressPolicy.from_strings(["127.0.0.1:8080"])
    assert await resolve_checked("127.0.0.1", 8080, policy) == [ipaddress.ip_address("127.0.0.1")]
    with pytest.raises(EgressDenied):
        await resolve_checked("127.0.0.1", 6379, policy)


# --------------------------------------------------------------------------------------------
# Literal normalisation and the deny table
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("[::1]", "::1"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
        ("[::ffff:7f00:1]", "::ffff:127.0.0.1"),
        ("64:ff9b::7f00:1", "64:ff9b::7f00:1"),
        ("2002:7f00:1::", "2002:7f00:1::"),
        ("::127.0.0.1", "::7f00:1"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "2001:0:4136:e378:8000:63bf:80ff:fffe"),  # Teredo
    ],
)
async def test_ip_literals_are_normalised_and_refused(host: str, expected: str) -> None:
    assert literal_address(host) == ipaddress.ip_address(expected)
    with pytest.raises(EgressDenied, match="loopback|unspecified"):
        await resolve_checked(host, 80, NOTHING_ALLOWED)
    # Allowlisted, the normalised address is what comes back (and what would be connected to).
    permissive = EgressPolicy.from_strings(["0.0.0.0/0", "::/0"])
    assert await resolve_checked(host, 80, permissive) == [ipaddress.ip_address(expected)]


def test_hostnames_are_not_literals() -> None:
    for host in ("example.com", "dead.beef", "1e100", "localhost", "0x7f.example"):
        assert literal_address(host) is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.1.1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("100.64.0.1", "CGNAT"),
        ("192.0.0.8", "IETF"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("192.0.2.1", "documentation"),
        ("198.51.100.1", "documentation"),
        ("203.0.113.9", "documentation"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("fd00:ec2::254", "metadata"),
        ("2001:db8::1", "documentation"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:0:7f00:1", "loopback"),  # IPv4-translated
        ("64:ff9b::a00:1", "private"),
        ("64:ff9b::a9fe:a9fe", "metadata"),  # NAT64
        ("2002:c0a8:101::1", "private"),  # 6to4 of 192.168.1.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),  # Teredo client 127.0.0.1
        ("2001:0:7f00:1::1", "loopback"),  # Teredo server 127.0.0.1
        ("::10.0.0.1", "private"),  # IPv4-compatible
        ("::8.8.8.8", "IPv4-compatible"),  # deprecated form, refused even when the inside is public
        ("64:ff9b:1::1", "NAT64"),
        ("100::1", "discard"),
    ],
)
def test_denied_addresses(address: str, reason: str) -> None:
    found = denial_reason(ipaddress.ip_address(address))
    assert found is not None and reason.lower() in found.lower(), found


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "172.32.0.1",
        "100.128.0.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert denial_reason(ipaddress.ip_address(address)) is None


def test_embedded_ipv4_extraction() -> None:
    v4 = ipaddress.IPv4Address
    assert embedded_ipv4(ipaddress.ip_address("::ffff:7f00:1")) == [v4("127.0.0.1")]
    assert embedded_ipv4(ipaddress.ip_address("64:ff9b::7f00:1")) == [v4("127.0.0.1")]
    assert embedded_ipv4(ipaddress.ip_address("2002:7f00:1::")) == [v4("127.0.0.1")]
    assert embedded_ipv4(ipaddress.ip_address("::127.0.0.1")) == [v4("127.0.0.1")]
    assert v4("127.0.0.1") in embedded_ipv4(ipaddress.ip_address("2001:0:4136:e378:8000:63bf:80ff:fffe"))
    assert embedded_ipv4(ipaddress.ip_address("::1")) == []
    assert embedded_ipv4(ipaddress.ip_address("2606:4700::1")) == []


async def test_resolved_ipv6_embedding_is_checked(dns: FakeDNS) -> None:
    dns.set("aaaa.test", "::ffff:127.0.0.1")
    dns.set("nat64.test", "64:ff9b::a9fe:a9fe")
    for name in ("aaaa.test", "nat64.test"):
        with pytest.raises(EgressDenied, match=name):
            await resolve_checked(name, 80, NOTHING_ALLOWED)


# --------------------------------------------------------------------------------------------
# URL parsing
# --------------------------------------------------------------------------------------------


def test_parse_url_accepts_ordinary_urls() -> None:
    assert parse_url("https://API.Example.com/v1/x?q=1#frag") == (
        "https",
        "api.example.com",
        443,
        "/v1/x?q=1",
    )
    assert parse_url("HTTP://example.com") == ("http", "example.com", 80, "/")
    assert parse_url("http://example.com:8080/a") == ("http", "example.com", 8080, "/a")
    assert parse_url("http://[2606:4700::1]:81/") == ("http", "[2606:4700::1]", 81, "/")
    assert parse_url("http://bücher.example/") == ("http", "xn--bcher-kva.example", 80, "/")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://127.0.0.1:25/",
        "javascript:alert(1)",
        "dict://127.0.0.1:11211/",
        "example.com/path",
        "//example.com/",
        "",
        "http://user@example.com/",
        "http://user:pw@example.com/",
        "http://@example.com/",
        "http://example.com@127.0.0.1/",
        "http://a@b@127.0.0.1/",
        "http:///path",
        "http://:80/",
        "http://",
        "http://[]/",
        "http://example.com:0/",
        "http://example.com:65536/",
        "http://example.com:-1/",
        "http://example.com:+80/",
        "http://example.com:080/",
        "http://example.com:8o/",
        "http://example.com:/",
        "http://example.com:80:80/",
        "http://::1/",
        "http://[::1/",
        "http://[127.0.0.1]/",
        "http://[fe80::1%25eth0]/",
        "http://127.0.0.1\\@example.com/",
        "http://exa mple.com/",
        "http://example.com\n/",
        "http://ex\tample.com/",
        "http://%31%32%37.0.0.1/",
        "http://-bad.example/",
        "http://a..b/",
        "http://" + "a" * 64 + ".example/",
    ],
)
def test_parse_url_rejects(url: str) -> None:
    with pytest.raises(EgressDenied):
        parse_url(url)


async def test_rejected_urls_never_reach_a_client(sent: list[httpx.Request]) -> None:
    for url in ("http://user@127.0.0.1/", "ftp://127.0.0.1/", "file:///etc/passwd"):
        with pytest.raises(EgressDenied):
            await send_checked("GET", url, policy=EgressPolicy.from_strings(["127.0.0.1"]), timeout=TIMEOUT)
    assert sent == []


# --------------------------------------------------------------------------------------------
# Request construction (https pinned to the IP, SNI and Host on the name)
# --------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self, responses: dict[str, httpx.Response] | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.responses = responses or {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.responses.get(str(request.url), httpx.Response(200, json={"ok": True}))


async def test_https_is_pinned_to_the_ip_with_sni_and_host_on_the_name(dns: FakeDNS) -> None:
    dns.set("api.example", "93.184.216.34")
    recorder = Recorder()
    response = await send_checked(
        "POST",
        "https://api.example/v1/run?x=1",
        policy=NOTHING_ALLOWED,
        json={"a": 1},
        headers={"Host": "127.0.0.1", "Authorization": "Bearer t"},
        timeout=TIMEOUT,
        transport=httpx.MockTransport(recorder),
    )
    assert response.json() == {"ok": True}
    (request,) = recorder.requests
    assert str(request.url) == "https://93.184.216.34/v1/run?x=1"  # httpx drops the default port
    assert request.headers["host"] == "api.example"  # the caller's Host override is ignored
    assert request.extensions["sni_hostname"] == "api.example"  # TLS SNI + cert check on the name
    assert request.headers["authorization"] == "Bearer t"
    assert jsonlib.loads(request.content) == {"a": 1}
    assert dns.calls["api.example"] == 1


async def test_pinned_request_variants(dns: FakeDNS) -> None:
    dns.set("v6.example", "2606:4700::6810:84e5")
    dns.set("plain.example", "93.184.216.34")
    recorder = Recorder()
    transport = httpx.MockTransport(recorder)
    await send_checked(
        "GET",
        "https://v6.example:8443/",
        policy=NOTHING_ALLOWED,
        timeout=TIMEOUT,
        transport=transport,
    )
    await send_checked("GET", "http://plain.example/", policy=NOTHING_ALLOWED, timeout=TIMEOUT, transport=transport)
    await send_checked(
        "GET",
        "https://93.184.216.34/",
        policy=NOTHING_ALLOWED,
        timeout=TIMEOUT,
        transport=transport,
    )
    v6, plain, literal = recorder.requests
    assert str(v6.url) == "https://[2606:4700::6810:84e5]:8443/"
    assert v6.headers["host"] == "v6.example:8443" and v6.extensions["sni_hostname"] == "v6.example"
    assert str(plain.url) == "http://93.184.216.34/" and plain.headers["host"] == "plain.example"
    assert "sni_hostname" not in plain.extensions
    # An IP-literal https URL verifies the certificate against that IP: no name to put in SNI.
    assert literal.headers["host"] == "93.184.216.34" and "sni_hostname" not in literal.extensions


async def test_cross_origin_redirect_drops_credentials(dns: FakeDNS) -> None:
    dns.set("api.example", "93.184.216.34")
    dns.set("other.example", "93.184.216.35")
    recorder = Recorder(
        {
            "https://93.184.216.34/a": httpx.Response(307, headers={"Location": "/b"}),
            "https://93.184.216.34/b": httpx.Response(307, headers={"Location": "https://other.example/c"}),
        }
    )
    headers = {"Authorization": "Bearer t", "X-Api-Key": "k", "User-Agent": "gw", "Cookie": "s=1"}
    await send_checked(
        "POST",
        "https://api.example/a",
        policy=NOTHING_ALLOWED,
        content=b"{}",
        timeout=TIMEOUT,
        headers={**headers, "Content-Type": "application/json"},
        transport=httpx.MockTransport(recorder),
    )
    _first, same_origin, other = recorder.requests
    assert same_origin.headers["authorization"] == "Bearer t" and same_origin.headers["x-api-key"] == "k"
    assert str(other.url) == "https://93.184.216.35/c" and other.extensions["sni_hostname"] == "other.example"
    assert "authorization" not in other.headers and "x-api-key" not in other.headers and "cookie" not in other.headers
    assert other.headers["user-agent"] == "gw" and other.content == b"{}" and other.method == "POST"


async def test_overall_timeout(serve: Callable[..., LoopbackServer]) -> None:
    b = serve("127.0.0.1")
    # The answer would take 10 s: a 0.2 s timeout that works ends the call long before (the
    # bound is half the delay, not a guess at the machine's speed; 0.9 s against a 1 s delay
    # was one).
    b.routes["/slow"] = Route(delay=10.0)
    started = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        await send_checked("GET", f"http://127.0.0.1:{b.port}/slow", policy=ONLY_B, timeout=0.2)
    assert time.monotonic() - started < 5


# --------------------------------------------------------------------------------------------
# Save-time check
# --------------------------------------------------------------------------------------------


def test_check_url_sync(dns: FakeDNS) -> None:
    dns.set("tool.example", "93.184.216.34")
    dns.set("sneaky.example", "10.0.0.7")
    check_url_sync("https://tool.example/hook", NOTHING_ALLOWED)
    assert dns.calls["tool.example"] == 1
    check_url_sync("http://127.0.0.1:9000/", EgressPolicy.from_strings(["127.0.0.1"]))
    check_url_sync("http://sneaky.example/", EgressPolicy.from_strings(["sneaky.example"]))
    for url in (
        "http://localhost/",
        "http://169.254.169.254/",
        "http://0x7f.1/",
        "http://sneaky.example/",
        "http://[::ffff:10.0.0.1]/",
        "ftp://tool.example/",
        "http://u@tool.example/",
        "http://nope.test/",
    ):
        with pytest.raises(EgressDenied):
            check_url_sync(url, NOTHING_ALLOWED)
