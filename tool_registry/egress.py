"""Egress policy for outbound calls (http tools, ad-hoc MCP servers): no SSRF.

The gateway POSTs to admin-registered tool URLs and to MCP server URLs that
arrive in client requests. Without a policy either becomes a way to reach
loopback services, the private network or the cloud metadata endpoint from
inside the gateway. The rules here:

* Only ``http``/``https`` URLs with a plain host (no ``user@``), a sane port.
* A host that is an IP literal in *any* spelling the C library would accept
  (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``, ``[::ffff:7f00:1]``,
  ...) is normalised first, so the check sees the address the OS would
  connect to. IPv4 embedded in IPv6 (mapped, translated, NAT64, 6to4, Teredo,
  IPv4-compatible) is extracted and checked too.
* Hostnames are resolved once; *every* address must pass (the connector may
  pick any of them), and the connection then goes to a checked address, not
  to the name: a second lookup is what DNS rebinding exploits.
* Redirects are followed by hand, each hop checked exactly like the first.
* An allowlist (:class:`EgressPolicy`) of hostnames, ``*.domain`` wildcards,
  IPs and CIDRs opens exceptions (e.g. an internal tool server).

Pure Python + httpx; the caller (Django settings/admin) supplies the allowlist.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx

__all__ = [
    "EgressDenied",
    "EgressPolicy",
    "EgressResolutionError",
    "IPAddress",
    "check_address",
    "check_url_sync",
    "denial_reason",
    "embedded_ipv4",
    "literal_address",
    "parse_url",
    "pinned_request",
    "resolve_checked",
    "send_checked",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_T = TypeVar("_T")

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

# First match wins, so the specific (metadata) entries come before their enclosing ranges and
# the message names the most useful reason. Python's ipaddress flags differ between patch
# releases, so the ranges we promise to deny are spelled out; the flags are only a backstop.
_V4_DENIED: tuple[tuple[ipaddress.IPv4Network, str], ...] = tuple(
    (ipaddress.IPv4Network(net), label)
    for net, label in (
        ("169.254.169.254/32", "cloud metadata endpoint"),
        ("169.254.170.2/32", "cloud metadata endpoint (ECS task)"),
        ("100.100.100.200/32", "cloud metadata endpoint (Alibaba)"),
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private (RFC 1918)"),
        ("172.16.0.0/12", "private (RFC 1918)"),
        ("192.168.0.0/16", "private (RFC 1918)"),
        ("100.64.0.0/10", "shared address space (CGNAT, RFC 6598)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("192.0.0.0/24", "IETF protocol assignment (RFC 6890)"),
        ("192.0.2.0/24", "documentation (TEST-NET-1)"),
        ("198.51.100.0/24", "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", "documentation (TEST-NET-3)"),
        ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
        ("198.18.0.0/15", "benchmarking (RFC 2544)"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved (class E)"),
    )
)

_V6_DENIED: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(net), label)
    for net, label in (
        ("fd00:ec2::254/128", "cloud metadata endpoint (AWS IPv6)"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "deprecated IPv4-compatible"),
        ("::ffff:0:0:0/96", "IPv4-translated (SIIT)"),
        ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
        ("100::/64", "discard-only (RFC 6666)"),
        ("2001:2::/48", "benchmarking (RFC 5180)"),
        ("2001:10::/28", "deprecated ORCHID"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation (RFC 9637)"),
        ("5f00::/16", "SRv6 SIDs (RFC 9602)"),
        ("fc00::/7", "unique local (private)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "deprecated site-local"),
        ("ff00::/8", "multicast"),
    )
)

_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")

# Lowercase ASCII hostname labels (after IDNA). Underscore is tolerated: real DNS names use it.
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
# Anything the legacy inet_aton parser might read as a number: digits, hex digits, 'x', dots.
_LEGACY_V4_CHARS = re.compile(r"^[0-9a-fx.]+$")
# Control characters and whitespace have no business in a URL we will act on; urlsplit silently
# drops some of them (tab, CR, LF), which would make what we check differ from what was written.
_BAD_URL_CHARS = re.compile(r"[\x00-\x20\x7f]")


class EgressDenied(Exception):
    """An outbound request was refused by the egress policy; the message names host and reason."""

    def __init__(self, message: str, *, host: str | None = None, address: IPAddress | None = None) -> None:
        super().__init__(message)
        self.host = host
        self.address = address


class EgressResolutionError(EgressDenied):
    """The host could not be resolved, so nothing could be checked: refused (fail closed)."""


# --------------------------------------------------------------------------------------------
# Policy
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EgressPolicy:
    """Exceptions to the deny rules.

    Entries: exact hostnames (case-insensitive, trailing dot ignored), ``*.example.com``
    wildcards (any depth of subdomain, not ``example.com`` itself), IP addresses and CIDRs,
    each optionally with a port (``mcp.internal:8443``, ``10.0.0.5:8080``, ``10.0.0.0/8:443``,
    ``[fd00::5]:8080``), which then allows that port only. A hostname entry allows whatever the
    name resolves to; an IP/CIDR entry allows that address whatever name led to it. Use
    :meth:`from_strings` to validate and normalise entries.
    """

    allow: tuple[str, ...] = ()
    # Where an operator adds an entry to this policy: named in a refusal, so it says what to do.
    allowlist: str = field(default="the egress allowlist", compare=False)

    @classmethod
    def from_strings(cls, entries: Iterable[str], *, allowlist: str = "the egress allowlist") -> EgressPolicy:
        """Validate entries (``ValueError`` naming the bad one); blank entries are skipped."""
        if isinstance(entries, str):  # a bare string would iterate by character
            entries = [entries]
        clean: list[str] = []
        for raw in entries:
            entry = _normalise_entry(raw)
            if entry and entry not in clean:
                clean.append(entry)
        return cls(tuple(clean), allowlist)

    @cached_property
    def _compiled(
        self,
    ) -> tuple[
        tuple[tuple[IPNetwork, int | None], ...], tuple[tuple[str, int | None], ...], tuple[tuple[str, int | None], ...]
    ]:
        # Lenient on purpose: a policy built directly (not via from_strings) still works; an entry
        # that is not a network is compared as a hostname and can only ever match that name.
        networks: list[tuple[IPNetwork, int | None]] = []
        exact: list[tuple[str, int | None]] = []
        suffixes: list[tuple[str, int | None]] = []
        for entry in self.allow:
            value, port = _split_port(entry.strip().lower())
            value = value.rstrip(".")
            try:
                networks.append((ipaddress.ip_network(value.strip("[]"), strict=False), port))
                continue
            except ValueError:
                pass
            if value.startswith("*."):
                suffixes.append((value[1:], port))  # ".example.com"
            elif value:
                exact.append((value, port))
        return tuple(networks), tuple(exact), tuple(suffixes)

    def host_allowed(self, host: str, port: int | None = None) -> bool:
        """Is this hostname (not an IP literal) allowlisted by name, on this port?

        ``port`` None (not known) matches only entries without a port."""
        name = host.strip().lower().rstrip(".")
        _, exact, suffixes = self._compiled
        return any(name == entry and _port_ok(p, port) for entry, p in exact) or any(
            name.endswith(suffix) and _port_ok(p, port) for suffix, p in suffixes
        )

    def address_allowed(self, address: IPAddress, port: int | None = None) -> bool:
        """Is this address inside an allowlisted IP/CIDR (on this port)?

        An IPv4-mapped IPv6 address (``::ffff:a.b.c.d``) *is* ``a.b.c.d`` on the wire, so it also
        matches IPv4 entries. Other embeddings (NAT64, 6to4, Teredo) go via a translator, a
        different host, so they only match an entry covering the IPv6 address itself.
        """
        networks, _, _ = self._compiled
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        return any(
            c in net and _port_ok(p, port) for c in candidates for net, p in networks if net.version == c.version
        )


STRICT = EgressPolicy()  # public addresses only: what a value an API client supplied gets


def _port_ok(entry_port: int | None, port: int | None) -> bool:
    return entry_port is None or entry_port == port


_PORT_SUFFIX = re.compile(r"^(?P<rest>.+?):(?P<port>[0-9]{1,5})$")


def _split_port(entry: str) -> tuple[str, int | None]:
    """``host:port``, ``[v6]:port``, ``cidr:port`` -> (entry, port); a bare IPv6 has no port."""
    match = _PORT_SUFFIX.match(entry)
    if match is None:
        return entry, None
    rest = match["rest"]
    if ":" in rest and not (rest.startswith("[") and rest.endswith("]")):
        return entry, None  # an IPv6 address (or CIDR) without brackets: its last group is no port
    return rest, int(match["port"])


def _normalise_entry(raw: str) -> str:
    entry, port = _split_port(str(raw).strip().lower())
    if port is not None:
        if not 1 <= port <= 65535:
            raise ValueError(f"invalid egress allowlist entry {raw!r}: port out of range")
        base = _normalise_entry_base(entry, raw)
        return f"[{base}]:{port}" if ":" in base else f"{base}:{port}"
    return _normalise_entry_base(entry, raw)


def _normalise_entry_base(entry: str, raw: str) -> str:
    if not entry:
        return ""
    bare = entry.strip("[]")
    if "%" in entry:  # IPv6 zone ids: scoped addresses compare unequal to what we resolve
        raise ValueError(f"invalid egress allowlist entry {raw!r}: zone identifiers are not supported")
    if "/" in entry:
        try:
            return str(ipaddress.ip_network(bare, strict=False))
        except ValueError:
            raise ValueError(f"invalid egress allowlist entry {raw!r}: not a valid CIDR") from None
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if ":" in entry or _legacy_ipv4(entry) is not None or re.fullmatch(r"[0-9.]+", entry):
        # '127.1', '0x7f000001', '300.1.1.1': almost certainly meant as an IP; refuse to guess.
        raise ValueError(
            f"invalid egress allowlist entry {raw!r}: write IP addresses in standard form "
            "(e.g. 10.0.0.5, fd00::5) or as a CIDR"
        )
    wildcard = entry.startswith("*.")
    name = entry[2:] if wildcard else entry
    try:
        ascii_name = _ascii_hostname(name.rstrip("."))
    except EgressDenied:
        ascii_name = None
    if not ascii_name or "*" in name:
        raise ValueError(f"invalid egress allowlist entry {raw!r}: expected a hostname, *.domain, IP or CIDR")
    return ("*." if wildcard else "") + ascii_name


# --------------------------------------------------------------------------------------------
# Addresses
# --------------------------------------------------------------------------------------------


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Numeric IPv4 forms the C resolver accepts (inet_aton): 2130706433, 0177.0.0.1, 0x7f.1, 127.1.

    glibc's getaddrinfo parses these as addresses rather than names, so a URL host written this
    way *connects* to that address; it must be checked as one.
    """
    if not _LEGACY_V4_CHARS.match(host) or host.endswith(".") or ".." in host:
        return None
    if not host[0].isdigit():  # numeric forms start with a digit; 'dead.beef' is a name
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def literal_address(host: str) -> IPAddress | None:
    """The address an IP-literal host denotes (any accepted spelling), or None for a hostname."""
    value = host.strip().lower()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
    if "%" in value:  # zone ids: not something a tool URL needs, and ambiguous to check
        raise EgressDenied(f"refusing {host!r}: IPv6 zone identifiers are not allowed", host=host)
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return _legacy_ipv4(value)


def embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses carried inside an IPv6 address (where a translator/tunnel may send us)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address in _IPV4_TRANSLATED or address in _NAT64:
        found.append(low32)
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # '::' and '::1' are not embeddings
        found.append(low32)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)  # (server, client); the client part is de-obfuscated
    return list(dict.fromkeys(found))


def _table_reason(address: IPAddress) -> str | None:
    table: Iterable[tuple[IPNetwork, str]] = _V4_DENIED if address.version == 4 else _V6_DENIED
    for network, label in table:
        if address in network:
            return label
    return None


def _ipv4_reason(address: ipaddress.IPv4Address) -> str | None:
    reason = _table_reason(address)
    if reason is None and not address.is_global:  # backstop for anything the table misses
        reason = "not globally routable"
    return reason


def denial_reason(address: IPAddress) -> str | None:
    """Why this address must not be contacted, or None if it is an ordinary public address.

    Ignores the allowlist (see :func:`check_address`).
    """
    if isinstance(address, ipaddress.IPv4Address):
        return _ipv4_reason(address)
    if address.ipv4_mapped is not None:
        # A dual-stack socket sends ::ffff:a.b.c.d straight to a.b.c.d: judge it as exactly that.
        reason = _ipv4_reason(address.ipv4_mapped)
        return f"IPv4-mapped {reason}" if reason else None
    for inner in embedded_ipv4(address):
        reason = _ipv4_reason(inner)
        if reason:
            return f"{reason} (embeds {inner})"
    reason = _table_reason(address)
    if reason:
        return reason
    if address in _NAT64:
        return None  # well-known NAT64 prefix with a public IPv4 inside: a DNS64 network's normal
    if address not in _GLOBAL_UNICAST:
        return "outside IPv6 global unicast (2000::/3)"
    if address.teredo is None and address.sixtofour is None and not address.is_global:
        return "not globally routable"
    return None


def check_address(
    host: str, address: IPAddress, policy: EgressPolicy, *, by_name: bool, port: int | None = None
) -> None:
    """Raise EgressDenied unless the address is allowlisted (on ``port``) or ordinary public.

    ``by_name``: the host is a hostname (not a literal), so a hostname allowlist entry applies.
    """
    if (by_name and policy.host_allowed(host, port)) or policy.address_allowed(address, port):
        return
    reason = denial_reason(address)
    if reason is None:
        return
    if by_name:
        message = f"refusing {host!r}: it resolves to {address}, a {reason} address"
    elif str(address) != host.strip("[]"):
        message = f"refusing {host!r}: it is the IP address {address}, a {reason} address"
    else:
        message = f"refusing {host!r}: {reason} address"
    raise EgressDenied(
        message + f" (add it to {policy.allowlist} if this is intended)",
        host=host,
        address=address,
    )


# --------------------------------------------------------------------------------------------
# URLs
# --------------------------------------------------------------------------------------------


def _ascii_hostname(host: str) -> str:
    """IDNA-encode and validate a hostname; what we resolve is exactly what goes in Host/SNI."""
    name = host.lower()
    try:
        name = name.encode("idna").decode("ascii") if not name.isascii() else name
    except UnicodeError:
        raise EgressDenied(f"refusing {host!r}: not a valid hostname", host=host) from None
    bare = name.removesuffix(".")
    if not bare or len(bare) > 253 or not all(_LABEL.match(label) for label in bare.split(".")):
        raise EgressDenied(f"refusing {host!r}: not a valid hostname", host=host)
    return name


def _split_netloc(url: str, netloc: str) -> tuple[str, str | None]:
    """(host, raw port or None) from a netloc without userinfo."""
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise EgressDenied(f"refusing {url!r}: malformed IPv6 host")
        host, rest = netloc[: end + 1], netloc[end + 1 :]
        if rest and not rest.startswith(":"):
            raise EgressDenied(f"refusing {url!r}: malformed host")
        return host, (rest[1:] if rest else None)
    if netloc.count(":") > 1:
        raise EgressDenied(f"refusing {url!r}: IPv6 hosts must be written in [brackets]")
    host, sep, port = netloc.partition(":")
    return host, (port if sep else None)


def _normalise_host(url: str, host: str) -> str:
    """Lowercase; bracketed hosts must be IPv6; hostnames IDNA-encoded and syntax-checked."""
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise EgressDenied(f"refusing {url!r}: [{host[1:-1]}] is not an IPv6 address") from None
        return host.lower()
    if not host:
        raise EgressDenied(f"refusing {url!r}: the URL has no host")
    if literal_address(host) is not None:
        return host.lower()
    return _ascii_hostname(host)


def parse_url(url: str) -> tuple[str, str, int, str]:
    """Split an outbound URL into (scheme, host, port, path-with-query), or raise EgressDenied.

    ``host`` keeps the URL's spelling (lowercased; IPv6 in brackets; IDNA-encoded names) so it can
    go into the Host header; pass it to :func:`resolve_checked` for the addresses.
    """
    if not isinstance(url, str) or not url:
        raise EgressDenied("refusing an empty URL")
    if _BAD_URL_CHARS.search(url):
        raise EgressDenied(f"refusing {url!r}: control characters or whitespace in the URL")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise EgressDenied(f"refusing {url!r}: malformed URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise EgressDenied(f"refusing {url!r}: only http and https URLs are allowed")
    netloc = parts.netloc
    if "@" in netloc:
        raise EgressDenied(f"refusing {url!r}: credentials in the URL (user@host) are not allowed")
    if "\\" in netloc or "%" in netloc:
        # Parsers disagree on these (WHATWG treats '\' as '/', '%xx' may be decoded): refuse.
        raise EgressDenied(f"refusing {url!r}: unusual characters in the host")
    raw_host, raw_port = _split_netloc(url, netloc)
    host = _normalise_host(url, raw_host)
    default_port = 443 if scheme == "https" else 80
    if raw_port is None:
        port = default_port
    elif re.fullmatch(r"[1-9][0-9]{0,4}", raw_port) and int(raw_port) <= 65535:
        port = int(raw_port)
    else:  # '', '0', '080', '+80', '65536', ... : no legitimate URL needs these
        raise EgressDenied(f"refusing {url!r}: invalid port {raw_port!r}")
    path = parts.path or "/"
    if not path.startswith("/"):
        raise EgressDenied(f"refusing {url!r}: malformed path")
    if parts.query:
        path += "?" + parts.query
    return scheme, host, port, path


# --------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------


def _addresses_from_infos(host: str, infos: list[Any]) -> list[IPAddress]:
    addresses: list[IPAddress] = []
    for family, _type, _proto, _canon, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        text = str(sockaddr[0]).split("%", 1)[0]  # strip a zone id; the check is on the address
        address = ipaddress.ip_address(text)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise EgressResolutionError(f"refusing {host!r}: it resolves to no IP address", host=host)
    return addresses


def _literal_or_name(host: str) -> tuple[str, IPAddress | None]:
    value = host.strip()
    literal = literal_address(value)
    if literal is None:
        value = _ascii_hostname(value)
    return value, literal


def _check_all(host: str, addresses: list[IPAddress], policy: EgressPolicy, port: int) -> list[IPAddress]:
    # Every address must pass: connectors (ours, or the OS's happy eyeballs) may use any of them.
    for address in addresses:
        check_address(host, address, policy, by_name=True, port=port)
    return addresses


async def resolve_checked(host: str, port: int, policy: EgressPolicy) -> list[IPAddress]:
    """The addresses to connect to for ``host``, all checked; EgressDenied if any is refused.

    IP literals (any spelling) are normalised without a lookup; names are resolved once with
    the event loop's getaddrinfo.
    """
    name, literal = _literal_or_name(host)
    if literal is not None:
        check_address(host, literal, policy, by_name=False, port=port)
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise EgressResolutionError(f"refusing {host!r}: it cannot be resolved ({exc})", host=host) from None
    return _check_all(name, _addresses_from_infos(host, infos), policy, port)


def check_url_sync(url: str, policy: EgressPolicy) -> None:
    """Save-time validation (admin, config): parse, resolve with socket.getaddrinfo, check.

    Raises EgressDenied. Passing now does not make later calls safe: every call re-checks.
    """
    _, host, port, _ = parse_url(url)
    name, literal = _literal_or_name(host)
    if literal is not None:
        check_address(host, literal, policy, by_name=False, port=port)
        return
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise EgressResolutionError(f"refusing {host!r}: it cannot be resolved ({exc})", host=host) from None
    _check_all(name, _addresses_from_infos(host, infos), policy, port)


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------

# Caller headers that are safe to carry to a different origin on a redirect. Everything else
# (Authorization, API keys from headers_env, signatures, cookies) stays with the origin the
# caller configured: a redirect must not leak a tool's credentials to wherever it points.
_CROSS_ORIGIN_SAFE_HEADERS = frozenset({"accept", "accept-encoding", "accept-language", "user-agent", "content-type"})
_BODY_HEADERS = frozenset({"content-type", "content-length", "content-encoding", "transfer-encoding"})


def _host_header(scheme: str, host: str, port: int) -> str:
    default = 443 if scheme == "https" else 80
    return host if port == default else f"{host}:{port}"


def pinned_request(
    client: httpx.AsyncClient,
    method: str,
    scheme: str,
    host: str,
    port: int,
    path: str,
    address: IPAddress,
    *,
    headers: Mapping[str, str] | None = None,
    json: Any = None,
    content: bytes | str | None = None,
    timeout: httpx.Timeout | None = None,
) -> httpx.Request:
    """Build a request that connects to ``address`` while speaking to ``host``.

    The URL carries the checked IP, so httpx/anyio never resolve anything; the Host header and,
    for https, TLS SNI + certificate verification (httpcore's ``sni_hostname`` extension) use the
    original hostname, so virtual hosting and TLS behave as if the name had been used.
    """
    ip_host = f"[{address}]" if address.version == 6 else str(address)
    request_headers = httpx.Headers(headers or {})
    request_headers.pop("host", None)  # the caller must not steer the Host header elsewhere
    request_headers["Host"] = _host_header(scheme, host, port)
    extensions: dict[str, Any] = {}
    if scheme == "https" and literal_address(host) is None:
        extensions["sni_hostname"] = host.rstrip(".")
    kwargs: dict[str, Any] = {"headers": request_headers, "extensions": extensions}
    if timeout is not None:
        kwargs["timeout"] = timeout
    if json is not None:
        kwargs["json"] = json
    if content is not None:
        kwargs["content"] = content
    return client.build_request(method, f"{scheme}://{ip_host}:{port}{path}", **kwargs)


def _origin(scheme: str, host: str, port: int) -> tuple[str, str, int]:
    return scheme, host.rstrip("."), port


async def send_checked(
    method: str,
    url: str,
    *,
    policy: EgressPolicy,
    json: Any = None,
    content: bytes | str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float,
    max_redirects: int = 3,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.Response:
    """Send one request under the egress policy and return the final response (body read).

    Each hop: parse + check the URL, resolve once, connect only to a checked address (trying the
    next checked address if one refuses the connection). Redirects (301/302/303/307/308) are
    followed by hand up to ``max_redirects`` times, each Location re-checked from scratch;
    307/308 keep method and body, 301/302/303 turn into a body-less GET (HEAD stays HEAD).
    Caller headers other than harmless ones are dropped when a redirect changes origin.

    ``timeout`` bounds the whole call (resolution, every hop, body reads). ``transport`` is for
    tests or custom connection handling; by default every hop gets a fresh client without env
    proxies (``trust_env=False``), so a pooled TLS connection verified for one name is never
    reused for another name on the same IP.

    Raises EgressDenied for refused URLs/addresses, ``httpx.TooManyRedirects``, and httpx
    transport errors (``httpx.TimeoutException`` when the overall timeout runs out).
    """
    if json is not None and content is not None:
        raise ValueError("pass json or content, not both")
    deadline = time.monotonic() + timeout
    # One TLS context per call, not per hop: building one loads the CA bundle (slow).
    ssl_context: ssl.SSLContext | None = None
    current_url = url
    current_headers = dict(headers or {})
    first_origin: tuple[str, str, int] | None = None
    for hop in range(max_redirects + 1):
        scheme, host, port, path = parse_url(current_url)
        origin = _origin(scheme, host, port)
        if first_origin is None:
            first_origin = origin
        elif origin != first_origin:
            current_headers = {k: v for k, v in current_headers.items() if k.lower() in _CROSS_ORIGIN_SAFE_HEADERS}
        addresses = await _with_deadline(resolve_checked(host, port, policy), deadline, current_url)
        if scheme == "https" and ssl_context is None and transport is None:
            ssl_context = httpx.create_ssl_context(trust_env=False)
        response = await _with_deadline(
            _send_pinned(
                method,
                scheme,
                host,
                port,
                path,
                addresses,
                headers=current_headers,
                json=json,
                content=content,
                deadline=deadline,
                transport=transport,
                ssl_context=ssl_context,
            ),
            deadline,
            current_url,
        )
        location = response.headers.get("location")
        if response.status_code not in REDIRECT_STATUSES or not location:
            return response
        if hop == max_redirects:
            raise httpx.TooManyRedirects(
                f"more than {max_redirects} redirects (last to {location!r})",
                request=response.request,
            )
        # Relative Locations resolve against the URL as the caller wrote it, not the pinned IP URL.
        current_url = urljoin(current_url, location)
        if response.status_code in (301, 302, 303):
            method = "HEAD" if method.upper() == "HEAD" else "GET"
            json = content = None
            current_headers = {k: v for k, v in current_headers.items() if k.lower() not in _BODY_HEADERS}
    raise AssertionError("unreachable")  # the loop returns or raises


async def _with_deadline(awaitable: Coroutine[Any, Any, _T], deadline: float, url: str) -> _T:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        awaitable.close()
        raise httpx.TimeoutException(f"timed out before reaching {url!r}")
    try:
        return await asyncio.wait_for(awaitable, remaining)
    except TimeoutError:  # asyncio.wait_for's timeout (an alias since 3.11)
        raise httpx.TimeoutException(f"{url!r} did not answer within the timeout") from None


async def _send_pinned(
    method: str,
    scheme: str,
    host: str,
    port: int,
    path: str,
    addresses: list[IPAddress],
    *,
    headers: Mapping[str, str],
    json: Any,
    content: bytes | str | None,
    deadline: float,
    transport: httpx.AsyncBaseTransport | None,
    ssl_context: ssl.SSLContext | None,
) -> httpx.Response:
    last_error: Exception | None = None
    for address in addresses:
        remaining = max(deadline - time.monotonic(), 0.001)
        client_kwargs: dict[str, Any] = {
            "trust_env": False,
            "follow_redirects": False,
            "timeout": remaining,
        }
        if transport is not None:
            client_kwargs["transport"] = transport
        elif ssl_context is not None:
            client_kwargs["verify"] = ssl_context
        client = httpx.AsyncClient(**client_kwargs)
        try:
            request = pinned_request(
                client,
                method,
                scheme,
                host,
                port,
                path,
                address,
                headers=headers,
                json=json,
                content=content,
            )
            return await client.send(request)  # not streamed: the body is read here
        except httpx.ConnectError as exc:  # refused/unreachable: the next checked address may work
            last_error = exc
        finally:
            if transport is None:
                await client.aclose()
    if last_error is None:  # resolve_checked never returns an empty list; belt and braces
        raise EgressResolutionError(f"refusing {host!r}: no address to connect to", host=host)
    raise last_error
