"""The ASGI entry: the /v1 API's async views served directly, everything else by Django.

Under ASGI, Django's handler runs every `MiddlewareMixin` middleware's hooks
and the request_started/request_finished signals through
`sync_to_async(thread_sensitive=True)`: a dozen thread hops and a new OS
thread per request, most of the CPU a stored create used to cost
(bench/README.md). The /v1 endpoints are async views that authenticate with
bearer keys, set no cookies and are CSRF-exempt, so this lane calls them
without that machinery. What the API still needs from the chain is applied
here, inline and without hops: the request id and access log
(RequestIdMiddleware), Host validation, and the response headers of the
security, common and X-Frame-Options middleware. The API's documents
(/v1/openapi.json, /v1/docs) are such views too; the admin, static files,
health checks and any /v1 view not marked `fast_lane` go through Django's full
handler as before. The WebSocket at /v1/responses is served here (websocket/),
and the lifespan: a process's SIGTERM drain and liveness beat at start, its
upstream session, database pool and usage records closed at shutdown.
"""

from __future__ import annotations

import asyncio
import io
import logging
import tempfile
import threading
from collections.abc import Awaitable, Callable
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIHandler, ASGIRequest, get_script_prefix
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import Resolver404, ResolverMatch, get_resolver, set_script_prefix

from ..observability.metrics import process_exit
from ..orchestration import lifecycle, liveness
from ..protocol.errors import GatewayError, InvalidRequest, NotFound, RequestTooLarge, ServerError
from ..store import db
from ..store.db import close_pool
from ..store.outages import unavailable
from ..store.usage import usage_writer
from .exception_handlers import dumps, error_response
from .middleware import RequestIdMiddleware
from .notes import RequestNotes
from .sse import EventStream

log = logging.getLogger("gateway.asgi")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Any], Awaitable[None]]


# The attribute that marks a view function as served by the fast lane.
FAST_LANE = "fast_lane"
# The attribute that marks a fast-lane view taking uploads (multipart): its body is spooled to a
# temporary file (in memory up to FILE_UPLOAD_MAX_MEMORY_SIZE) under GATEWAY_FILES_MAX_BYTES and
# a margin for the form's other fields, not read whole into memory under GATEWAY_MAX_REQUEST_BYTES.
UPLOAD_BODY = "upload_body"
# What a multipart body may carry besides the file: its boundaries, part headers and small fields.
UPLOAD_MARGIN_BYTES = 1 << 20


def fast_lane(view: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an async API view as served by ApiApplication (it must not need the session, CSRF or
    user middleware: the history's staff-session authentication loads a session itself, only
    for a GET or HEAD without a key; drf_policies.KeyOrStaffSessionAuthentication)."""
    view.__dict__[FAST_LANE] = True  # a mark on the function object itself (a function's attributes are its __dict__)
    return view


class ApiApplication:
    def __init__(self, django: ASGIHandler, prefix: str = "/v1/") -> None:
        self.django = django
        self.prefix = prefix
        # Only their plain sync hooks are called: header work, no I/O.
        self.security = SecurityMiddleware(_never)
        self.common = CommonMiddleware(_never)
        self.xframe = XFrameOptionsMiddleware(_never)
        self.handle = RequestIdMiddleware(self._respond)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        path, root = scope.get("path", ""), scope.get("root_path", "")
        path_info = path[len(root) :] if root and path.startswith(root) else path
        if scope["type"] == "websocket":
            if path_info.rstrip("/") == self.prefix + "responses":
                # Imported at the first WebSocket: a process that serves none never pays for it.
                from .websocket import serve

                return await serve(scope, receive, send)
            return await _refuse_websocket(receive, send)
        if scope["type"] != "http":
            return await self.django(scope, receive, send)
        if not path_info.startswith(self.prefix):
            return await self.django(scope, receive, send)
        match = _resolve(path_info)
        rejected: GatewayError | None = None
        if match is None:  # an unknown /v1 URL: the API's JSON 404, not Django's HTML page
            shown = path_info.encode("unicode_escape").decode("ascii")[:200]
            rejected = NotFound(f"Invalid URL ({scope.get('method', 'GET')} {shown}).", param=None, code="not_found")
        elif not getattr(match.func, FAST_LANE, False):
            return await self.django(scope, receive, send)
        if lifecycle.draining():  # SIGTERM: new work goes to another process
            return await _answer_now(scope, send, lifecycle.shutting_down())
        upload = match is not None and rejected is None and getattr(match.func, UPLOAD_BODY, False)
        spooled: tempfile.SpooledTemporaryFile[bytes] | None = None
        body = b""
        try:
            if upload and scope.get("method") == "POST":
                spooled = await self._spool_body(scope, receive)
            else:
                body = await self._read_body(scope, receive)
        except _Disconnected:
            return
        except GatewayError as exc:  # answered like any request: request id, access log, headers
            body, rejected = b"", rejected or exc
        prefix = get_script_prefix(scope)
        if prefix != "/":  # "/" is every request task's own default: setting it again is waste
            set_script_prefix(prefix)
        if spooled is not None:
            request = ASGIRequest(scope, spooled)
            if "CONTENT_LENGTH" not in request.META:  # chunked: the length the parser needs
                request.META["CONTENT_LENGTH"] = str(_size(spooled))
        else:
            request = ASGIRequest(scope, io.BytesIO(body))
            request._body = body  # read whole above: `request.body` need not read and check it again
            if body and "CONTENT_LENGTH" not in request.META:
                # A chunked body, read whole above: its length, as a parser (DRF's) looks for one.
                request.META["CONTENT_LENGTH"] = str(len(body))
        request.resolver_match = match
        RequestNotes.of(request).rejected = rejected  # the lane's refusal rides on the request to the view

        # As Django's handler does: stop the view when the client goes away (a stream's
        # engine then cancels the upstream call and stores what it had). The view runs in this
        # task and the listener cancels it: a second task and asyncio.wait would cost each request.
        task = cast(asyncio.Task[None], asyncio.current_task())
        listener = asyncio.ensure_future(_cancel_at_disconnect(receive, task))
        try:
            await self._process(request, send)
        except asyncio.CancelledError:
            if not listener.done() or listener.cancelled():
                raise  # cancelled by the server, not by the client leaving
            task.uncancel()  # the client left: this request ends here, quietly
        finally:
            listener.cancel()
            if spooled is not None:
                spooled.close()  # the upload's temporary file, if it went to disk

    async def _process(self, request: HttpRequest, send: Send) -> None:
        response = await self.handle(request)
        try:
            if isinstance(response, EventStream):
                await response.write_to(send, _start(response))
            elif not response.streaming:  # as Django's send_response, in one body message
                await send(_start(response))
                await send({"type": "http.response.body", "body": response.content})
            else:
                await self.django.send_response(response, send)
        except asyncio.CancelledError:
            pass  # the client disconnected while the body was being sent

    async def _respond(self, request: HttpRequest) -> HttpResponseBase:
        if not _host_allowed(request):
            return error_response(InvalidRequest("Invalid Host header.", param=None, code="invalid_host"))
        rejected = RequestNotes.of(request).rejected  # noted by the lane above
        if rejected is not None:
            return error_response(rejected)
        nul = _nul_parameter(request)
        if nul is not None:
            # No database stores NUL in text, and no id or filter of ours contains one.
            return error_response(InvalidRequest(f"'{nul}' must not contain a NUL character.", param=nul))
        try:
            response: Any = self.security.process_request(request)
            if response is None and (settings.DISALLOWED_USER_AGENTS or settings.PREPEND_WWW):
                # CommonMiddleware's request hook acts on these two settings only: skipped without them.
                response = self.common.process_request(request)
            if response is None:
                match = cast(ResolverMatch, request.resolver_match)  # set by __call__
                response = await match.func(request, *match.args, **match.kwargs)
            response = self.security.process_response(request, response)
            response = self.common.process_response(request, response)
            return self.xframe.process_response(request, response)
        except Exception as exc:
            outage = unavailable(exc)
            if outage is not None:
                return error_response(outage)
            log.exception("unhandled error", extra={"request_id": RequestNotes.of(request).request_id})
            return error_response(ServerError("The gateway failed to handle this request."))

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        limit = settings.GATEWAY_MAX_REQUEST_BYTES
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise InvalidRequest("Invalid Content-Length header.") from None
                if declared > limit:
                    raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected()
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _spool_body(self, scope: Scope, receive: Receive) -> tempfile.SpooledTemporaryFile[bytes]:
        """An upload's body in a temporary file (as Django's own ASGI handler reads bodies),
        under GATEWAY_FILES_MAX_BYTES and the form's margin."""
        limit = settings.GATEWAY_FILES_MAX_BYTES + UPLOAD_MARGIN_BYTES
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise InvalidRequest("Invalid Content-Length header.") from None
                if declared > limit:
                    raise _upload_too_large()
        # Closed by the caller when the request ends (or below, on a refusal): not a `with` block.
        spooled = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")  # noqa: SIM115
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Disconnected()
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        raise _upload_too_large()
                    if size > settings.FILE_UPLOAD_MAX_MEMORY_SIZE:
                        # Past max_size the file is on disk: written in a thread, not on the event loop.
                        await asyncio.to_thread(spooled.write, chunk)
                    else:
                        spooled.write(chunk)
                if not message.get("more_body", False):
                    spooled.seek(0)
                    return spooled
        except BaseException:
            spooled.close()
            raise


def _size(spooled: tempfile.SpooledTemporaryFile[bytes]) -> int:
    position = spooled.tell()
    end = spooled.seek(0, io.SEEK_END)
    spooled.seek(position)
    return end


def _upload_too_large() -> RequestTooLarge:
    limit = settings.GATEWAY_FILES_MAX_BYTES
    return RequestTooLarge(f"Invalid 'file': it is larger than this gateway accepts ({limit} bytes).", param="file")


async def _start_beating() -> asyncio.Task[None] | None:
    """This process's liveness (orchestration/liveness.py): its first beat before any request,
    then one every GATEWAY_PROCESS_HEARTBEAT_SECONDS."""
    try:
        await liveness.beat_once()
    except Exception as exc:  # noqa: BLE001 - the database may come later: the loop retries
        log.warning("first liveness beat failed: %s: %s", type(exc).__name__, str(exc)[:200])
    return asyncio.ensure_future(liveness.beat_forever())


async def _check_secrets() -> None:
    """Each secret the gateway cannot have, logged once at start (orchestration/secrets.py);
    in the background: start-up does not wait for the database."""
    from ..orchestration.secrets import secrets_check

    try:
        await db.run(secrets_check)
    except Exception as exc:  # noqa: BLE001 - a check, not a condition of serving
        log.warning("secrets check at start-up failed: %s: %s", type(exc).__name__, str(exc)[:200])


async def _lifespan(receive: Receive, send: Send) -> None:
    """Django has no lifespan support; at startup a server's process installs its SIGTERM drain
    and its liveness beat; at shutdown the upstream and async database connections are closed
    cleanly."""
    beats: asyncio.Task[None] | None = None
    checked: asyncio.Future[None] | None = None  # kept: a task nobody holds may be collected
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if threading.current_thread() is threading.main_thread():  # a server's process, not a test's thread
                lifecycle.install_sigterm_drain()
                beats = await _start_beating()
                checked = asyncio.ensure_future(_check_secrets())
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            # Here, not at the top: aiohttp is a large part of a web process's start-up (-X importtime),
            # paid by the first model call instead (a process that made none closes no session).
            from ..upstreams.http import close_session

            if beats is not None:
                beats.cancel()
            if checked is not None:
                checked.cancel()
            await close_session()
            await usage_writer.close()  # the usage records of the last calls
            await close_pool()
            process_exit()
            await send({"type": "lifespan.shutdown.complete"})
            return


def _start(response: HttpResponseBase) -> dict[str, Any]:
    """`http.response.start` for a response this lane writes itself (what Django's
    `ASGIHandler.send_response` sends first: its headers and cookies)."""
    headers = [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]
    headers += [
        (b"Set-Cookie", cookie.output(header="").encode("ascii").strip()) for cookie in response.cookies.values()
    ]
    return {"type": "http.response.start", "status": response.status_code, "headers": headers}


# Host header values (and what else get_host() reads) that ALLOWED_HOSTS admitted: a client
# sends the same one on every request, and checking it each time is waste. Only admitted values are kept,
# at most _HOSTS_KEPT of them, so a client inventing hosts cannot grow it; emptied when a
# setting get_host() reads changes (tests).
_allowed_hosts: set[tuple[str | None, ...]] = set()
_HOSTS_KEPT = 64
_HOST_SETTINGS = frozenset({"ALLOWED_HOSTS", "USE_X_FORWARDED_HOST", "USE_X_FORWARDED_PORT", "DEBUG"})


def _host_allowed(request: HttpRequest) -> bool:
    meta = request.META
    key = (
        meta.get("HTTP_HOST"),
        meta.get("HTTP_X_FORWARDED_HOST"),
        meta.get("HTTP_X_FORWARDED_PORT"),
        meta.get("SERVER_NAME"),
        meta.get("SERVER_PORT"),
    )
    if key in _allowed_hosts:
        return True
    try:
        request.get_host()  # ALLOWED_HOSTS
    except DisallowedHost:
        return False
    if len(_allowed_hosts) < _HOSTS_KEPT:
        _allowed_hosts.add(key)
    return True


# The matches of the API's fixed paths (patterns without parameters: a bounded set, the URLconf's),
# shared by their requests: nothing writes to a ResolverMatch, and resolving again is waste.
_fixed_matches: dict[str, ResolverMatch] = {}


def _resolve(path_info: str) -> ResolverMatch | None:
    match = _fixed_matches.get(path_info)
    if match is not None:
        return match
    try:
        match = get_resolver().resolve(path_info)
    except Resolver404:
        return None
    if match.route == path_info[1:]:  # the pattern is this literal path (not the catch-all 404)
        _fixed_matches[path_info] = match
    return match


@receiver(setting_changed)
def _forget_allowed_hosts(*, setting: str, **kwargs: Any) -> None:
    if setting in _HOST_SETTINGS:
        _allowed_hosts.clear()
    if setting == "ROOT_URLCONF":
        _fixed_matches.clear()


def _nul_parameter(request: HttpRequest) -> str | None:
    """The path or query parameter holding a NUL character, if any."""
    if "\x00" in request.path_info:
        match = cast(ResolverMatch, request.resolver_match)
        return next((name for name, value in match.kwargs.items() if "\x00" in str(value)), "path")
    query = request.META.get("QUERY_STRING", "")
    if "%00" in query or "\x00" in query:
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                return name.replace("\x00", "")
    return None


async def _refuse_websocket(receive: Receive, send: Send) -> None:
    """Only /v1/responses speaks WebSocket (Django's handler cannot take one)."""
    if (await receive())["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008})


async def _answer_now(scope: Scope, send: Send, error: GatewayError) -> None:
    """An error answered before the request is read (its body is never needed)."""
    body = dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(f"The request body is larger than this gateway accepts ({limit} bytes).")


class _Disconnected(Exception):
    pass


async def _cancel_at_disconnect(receive: Receive, task: asyncio.Task[None]) -> None:
    """Cancel the request's task when its client disconnects (or its receive channel breaks)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # a broken channel ends the request like a disconnect
        log.debug("receive failed while waiting for a disconnect", exc_info=True)
    task.cancel()


def _never(request: HttpRequest) -> HttpResponseBase:
    raise AssertionError("only the middleware's hooks are called")
