"""Scripted OpenAI-compatible Chat Completions server for tests and benchmarks.

The gateway under test talks to an upstream LLM over HTTP using the Chat
Completions protocol.  Mocking the HTTP client would hide exactly the bugs we
care about (SSE framing, chunked transfer, disconnects, timeouts), so this
module runs a *real* HTTP server on loopback:

* a hand-written raw ASGI app (no framework: it must be cheap enough to serve
  as the upstream in throughput benchmarks),
* served by uvicorn in a daemon thread with its own event loop,
* whose replies are scripted per upstream model name with :class:`Reply`.

Typical use::

    with ScriptedUpstream() as upstream:
        upstream.enqueue("gpt-x", Reply(text="Hello!"))
        ...point the gateway at upstream.base_url...
        assert upstream.requests[0].body["model"] == "gpt-x"

Benchmarks can run it standalone::

    python -m tests.support.upstream --port 8091 --latency 0.05

in which mode every model answers with an echo of the last user message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import socket
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypedDict

import uvicorn

__all__ = ["RecordedRequest", "Reply", "ScriptedUpstream", "main"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ECHO_MODEL = "echo"
_MALFORMED_EVENT = b"data: {not json\n\n"
_DONE_EVENT = b"data: [DONE]\n\n"
_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
]


class Pacing(TypedDict, total=False):
    """A Reply's streaming pace, spread into it as keywords: `Reply(text=..., **SLOW)`."""

    chunk_chars: int
    interval: float


@dataclass
class Reply:
    """One scripted upstream answer.  See the module docstring for usage."""

    text: str | None = None
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"  # or "reasoning" (vLLM/OpenRouter style)
    refusal: str | None = None
    # [{"id": "call_1", "name": "f", "arguments": "{\"a\":1}"}]; arguments may be a dict.
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None  # default: "tool_calls" if tool_calls else "stop"
    usage: dict[str, Any] | None = None  # default: computed, see _usage()
    status: int = 200  # non-200: reply with this status and error_body instead
    error_body: dict[str, Any] | None = None
    error_headers: dict[str, str] | None = None  # e.g. {"retry-after": "1"} with status 429
    delay: float = 0.0  # seconds before response headers
    chunk_chars: int = 4  # streaming: chars of text/reasoning/arguments per chunk
    interval: float = 0.0  # streaming: seconds between chunks
    interleave_tool_calls: bool = False  # streaming: round-robin fragments of parallel calls
    # N below counts `data:` events sent, including the initial role chunk.
    disconnect_after: int | None = None  # streaming: abrupt close after N data events
    malformed_after: int | None = None  # streaming: inject `data: {not json` after N events
    raw_chunks: Sequence[dict[str, Any] | str] | None = None  # streaming: exact SSE payloads
    raw_done: bool = True  # append `data: [DONE]` after raw_chunks
    raw_body: dict[str, Any] | str | None = None  # non-streaming: exact body (str = verbatim)
    include_usage_chunk: bool | None = None  # default: request's stream_options.include_usage
    echo: bool = False  # text = "echo: " + last user message text
    response_fields: dict[str, Any] | None = None  # /v1/responses: more fields of the Response object


@dataclass(frozen=True)
class RecordedRequest:
    """A request as received by the upstream (headers have lower-case keys)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    method: str = "POST"


_ECHO_REPLY = Reply(echo=True)
_MODEL_CALL_PATHS = frozenset({"/v1/chat/completions", "/v1/messages", "/v1/responses"})


class _AbruptClose(Exception):
    """Raised inside the ASGI app to make uvicorn drop the connection mid-body.

    uvicorn closes the transport when an app raises after the response has
    started, so the client sees an incomplete chunked body: a genuine protocol
    error, unlike a clean end-of-stream without ``[DONE]``.
    """


class _SuppressAbruptCloseLog(logging.Filter):
    """Hide uvicorn's "Exception in ASGI application" traceback for scripted closes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _AbruptClose)


_ABRUPT_CLOSE_FILTER = _SuppressAbruptCloseLog()


class _DisconnectWatch:
    """Background ``receive()`` loop that notices the client going away.

    Once the request body has been read, the only message uvicorn can deliver
    is ``http.disconnect``; listening for it concurrently is the only reliable
    way to see aborts, because uvicorn's ``send`` silently no-ops afterwards.
    """

    def __init__(self, receive: Receive) -> None:
        self.event = asyncio.Event()
        # Set before the final send: uvicorn also reports "disconnect" once the
        # response is complete, which must not count as a client abort.
        self.finished = False
        self._task = asyncio.ensure_future(self._run(receive))

    async def _run(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not self.finished:
                    self.event.set()
                return

    @property
    def disconnected(self) -> bool:
        return self.event.is_set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True if the client disconnected meanwhile."""
        try:
            await asyncio.wait_for(self.event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.finished = True
        self._task.cancel()


# Compact separators, as OpenAI emits them.  A shared encoder because
# json.dumps() with non-default arguments builds a new encoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def words_vector(text: str, dimensions: int = 64) -> list[float]:
    """A bag-of-words vector: each word (lower-cased, a plural's `s` dropped) adds 1 to the
    dimension its CRC-32 picks. Deterministic, and texts sharing words have a high cosine."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        stem = word[:-1] if len(word) > 3 and word.endswith("s") else word
        vector[zlib.crc32(stem.encode()) % dimensions] += 1.0
    return vector


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _message_text(content: Any) -> str:
    """Text of a message ``content`` (plain string or list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Accept both Chat Completions ("text") and Responses ("input_text") parts.
        return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _echo_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return "echo: " + _message_text(message.get("content"))
    return "echo: "


def _responses_as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request seen as Chat Completions, for the scripting (model, echo, usage)."""
    raw = body.get("input")
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw or []
    messages = [
        {"role": item.get("role"), "content": item.get("content")}
        for item in items
        if isinstance(item, dict) and item.get("type", "message") == "message"
    ]
    return {**body, "messages": messages}


def _messages_as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request seen as Chat Completions, for the scripting."""
    messages = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
        messages.append({"role": message.get("role"), "content": content})
    return {**body, "messages": messages}


_CACHE_TTLS = {"5m": 0, "1h": 1}


# JSON Schema keywords outside the subset Anthropic's structured outputs decode.
_UNSUPPORTED_SCHEMA_KEYWORDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern"}
)


def _schema_problem(schema: Any, param: str) -> str | None:
    """What Anthropic refuses in a structured-output schema: an object that is not closed, a
    keyword outside its subset (anywhere in the schema)."""
    if isinstance(schema, list):
        return next((p for p in (_schema_problem(s, param) for s in schema) if p), None)
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    kinds: list[Any] = kind if isinstance(kind, list) else [kind]
    if ("object" in kinds or "properties" in schema) and schema.get("additionalProperties") is not False:
        return f"{param}: For 'object' type, 'additionalProperties' must be explicitly set to false"
    unsupported = sorted(_UNSUPPORTED_SCHEMA_KEYWORDS & set(schema))
    if unsupported:
        return f"{param}: '{unsupported[0]}' is not supported"
    nested = [*(schema.get("properties") or {}).values(), *(schema.get("$defs") or {}).values()]
    nested += [schema[k] for k in ("items", "anyOf", "allOf", "oneOf") if k in schema]
    return next((p for p in (_schema_problem(s, param) for s in nested) if p), None)


def _output_format_problem(value: Any, param: str) -> str | None:
    if not isinstance(value, dict) or value.get("type") != "json_schema" or not isinstance(value.get("schema"), dict):
        return f"{param}: expected {{'type': 'json_schema', 'schema': {{...}}}}"
    extra = sorted(set(value) - {"type", "schema"})
    if extra:
        return f"{param}.{extra[0]}: Extra inputs are not permitted"
    return _schema_problem(value["schema"], f"{param}.schema")


def _messages_problem(body: dict[str, Any], headers: dict[str, str]) -> str | None:
    """What Anthropic's Messages API would refuse with a 400 in the fields this gateway sets
    beyond the basics: structured output (`output_config.format`, or the beta's top-level
    `output_format` with its header) and `cache_control` breakpoints (at most 4, each
    `{"type": "ephemeral", "ttl"?: "5m" | "1h"}`, longer lifetimes before shorter ones)."""
    config = body.get("output_config")
    if config is not None:
        if not isinstance(config, dict) or set(config) - {"format", "effort"}:
            return "output_config: expected an object with 'format' and/or 'effort'"
        if config.get("format") is not None:
            problem = _output_format_problem(config["format"], "output_config.format")
            if problem:
                return problem
    if "output_format" in body:
        if "structured-outputs-2025-11-13" not in headers.get("anthropic-beta", ""):
            return "output_format: Extra inputs are not permitted (the structured-outputs beta is not enabled)"
        problem = _output_format_problem(body["output_format"], "output_format")
        if problem:
            return problem
    blocks: list[Any] = [body.get("system")] if isinstance(body.get("system"), dict) else []
    blocks += body["system"] if isinstance(body.get("system"), list) else []
    blocks += body.get("tools") or []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        blocks += content if isinstance(content, list) else []
    marks = [b["cache_control"] for b in blocks if isinstance(b, dict) and "cache_control" in b]
    if len(marks) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {len(marks)}."
    shortest = 1
    for mark in marks:
        if not isinstance(mark, dict) or mark.get("type") != "ephemeral" or set(mark) - {"type", "ttl"}:
            return "cache_control: expected {'type': 'ephemeral', 'ttl'?: '5m' | '1h'}"
        ttl = _CACHE_TTLS.get(mark.get("ttl", "5m"))
        if ttl is None:
            return f"cache_control.ttl: {mark.get('ttl')!r} is not one of '5m', '1h'"
        if ttl > shortest:
            return "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
        shortest = ttl
    return None


def _responses_usage(usage: dict[str, Any]) -> dict[str, Any]:
    if "input_tokens" in usage:
        return usage
    return {
        "input_tokens": usage.get("prompt_tokens", 0),
        "output_tokens": usage.get("completion_tokens", 0),
        "total_tokens": usage.get("total_tokens", 0),
        "input_tokens_details": {"cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)},
        "output_tokens_details": {
            "reasoning_tokens": (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
        },
    }


def _usage(body: dict[str, Any], text: str | None, reasoning: str | None) -> dict[str, Any]:
    """Deterministic, cheap stand-in for token accounting."""
    messages = body.get("messages")
    chars = 0
    if isinstance(messages, list):
        chars = sum(len(_message_text(m.get("content"))) for m in messages if isinstance(m, dict))
    prompt = max(1, chars // 4)
    reasoning_tokens = len(reasoning.split()) if reasoning else 0
    completion = max(1, len((text or "").split()) + reasoning_tokens)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


def _normalize_tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accept the short {"id","name","arguments"} form (or OpenAI's nested form)."""
    out: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        fn = call.get("function") or {}
        name = call.get("name", fn.get("name", ""))
        arguments = call.get("arguments", fn.get("arguments", ""))
        if not isinstance(arguments, str):
            arguments = _dumps(arguments)
        out.append(
            {
                "id": call.get("id") or f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    return out


def _pieces(text: str, size: int) -> list[str]:
    if size <= 0 or len(text) <= size:
        return [text] if text else []
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else _dumps(payload)
    return b"data: " + data.encode() + b"\n\n"


def _error(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


class ScriptedUpstream:
    """Real loopback HTTP server speaking OpenAI Chat Completions, scripted per model.

    The instance itself is the ASGI app.  All public methods are thread-safe:
    tests call them from the main thread while uvicorn runs in its own thread.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
        default_echo: bool = False,
    ) -> None:
        self.host = host
        self.latency = latency  # global extra delay before every reply (benchmarks)
        self.default_echo = default_echo  # unknown models echo instead of 404 (CLI mode)
        self._requested_port = port
        self._port: int | None = None
        self._lock = threading.Lock()
        self._aborted_cond = threading.Condition(self._lock)
        self._queues: dict[str, deque[Reply]] = {}
        self._defaults: dict[str, Reply] = {}
        # model -> a function of the request body that picks the reply (None: the queue decides)
        self._responders: dict[str, Callable[[dict[str, Any]], Reply | None]] = {}
        self.model_info: dict[str, dict[str, Any]] = {}  # extra /v1/models fields, e.g. max_model_len
        # True: answer vLLM's POST /tokenize (count = characters // 3 + 3 per message);
        # "llama.cpp": answer llama.cpp's /apply-template (dropping tools) and /tokenize (text only).
        self.tokenizer: bool | str = False
        # (status, body) for POST /v1/embeddings instead of vectors, e.g. llama.cpp's 501 without --embeddings
        self.embeddings_error: tuple[int, dict[str, Any]] | None = None
        # Request fields the server refuses with a 400, as a strict server refuses what it does not
        # know (an Anthropic-compatible server without structured outputs, a Chat server and
        # `prompt_cache_key`).
        self.refused_fields: set[str] = set()
        self._requests: list[RecordedRequest] = []
        self._aborted: list[tuple[float, int]] = []
        self._active_streams = 0
        # model -> streams in progress now, and the most at once since the last reset (a
        # concurrency limit's test counts a tenant's runs upstream by the model it calls)
        self._active_by_model: dict[str, int] = {}
        self._peak_by_model: dict[str, int] = {}
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._thread_error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("ScriptedUpstream is not started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _bind(self) -> socket.socket:
        # Binding ourselves (rather than letting uvicorn do it) gives us the real
        # port before the server thread even starts, even with port=0.
        # proto must be IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on
        # accepted sockets whose proto says TCP, and without it Nagle + delayed
        # ACK add ~40 ms to every response.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        self._port = sock.getsockname()[1]
        return sock

    def _config(self, log_level: str, embedded: bool) -> uvicorn.Config:
        logging.getLogger("uvicorn.error").addFilter(_ABRUPT_CLOSE_FILTER)
        return uvicorn.Config(
            self,
            host=self.host,
            port=self.port,
            log_level=log_level,
            lifespan="off",
            interface="asgi3",
            access_log=False,  # per-request logging would skew benchmarks
            # Embedded in a test process, don't let uvicorn dictConfig() over the
            # host's logging setup; records still propagate to the root logger.
            log_config=None if embedded else uvicorn.config.LOGGING_CONFIG,
        )

    def start(self, timeout: float = 10.0) -> Self:
        """Start serving in a daemon thread; returns once connections are accepted."""
        if self._thread is not None:
            raise RuntimeError("ScriptedUpstream already started")
        sock = self._bind()
        server = uvicorn.Server(self._config("warning", embedded=True))
        self._thread_error = None

        def serve() -> None:
            try:
                server.run(sockets=[sock])
            # BaseException: uvicorn reports bind/startup failures via sys.exit().
            except BaseException as exc:  # noqa: BLE001 - surfaced by start(), not lost
                self._thread_error = exc
            finally:
                sock.close()

        thread = threading.Thread(target=serve, name=f"scripted-upstream:{self._port}", daemon=True)
        self._server, self._thread = server, thread
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ScriptedUpstream failed to start: {self._thread_error!r}")
            time.sleep(0.002)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server, cancelling in-flight responses.  Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None or thread is None:
            return
        # force_exit: don't wait for in-flight (possibly endless) streams to end.
        server.should_exit = True
        server.force_exit = True
        thread.join(timeout)

    def run(self, log_level: str = "info") -> None:
        """Serve in the foreground (blocking, Ctrl-C to stop).  Used by the CLI."""
        sock = self._bind()
        server = uvicorn.Server(self._config(log_level, embedded=False))
        print(f"ScriptedUpstream serving {self.base_url}", flush=True)
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ scripting

    def enqueue(self, model: str, *replies: Reply) -> None:
        """Queue replies (FIFO) for requests whose body ``model`` equals ``model``."""
        with self._lock:
            self._queues.setdefault(model, deque()).extend(replies)

    def set_default(self, model: str, reply: Reply | None) -> None:
        """Reply used when ``model``'s queue is empty (None removes it)."""
        with self._lock:
            if reply is None:
                self._defaults.pop(model, None)
            else:
                self._defaults[model] = reply

    def set_responder(self, model: str, responder: Callable[[dict[str, Any]], Reply | None] | None) -> None:
        """Pick ``model``'s replies from each request body (a client whose call order is its
        own, such as Codex compacting when it decides to); None from it falls back to the queue."""
        with self._lock:
            if responder is None:
                self._responders.pop(model, None)
            else:
                self._responders[model] = responder

    def reset(self) -> None:
        """Forget all scripts, recorded requests and recorded aborts."""
        with self._lock:
            self._responders.clear()
            self._queues.clear()
            self._defaults.clear()
            self._requests.clear()
            self._aborted.clear()
            self.refused_fields = set()
            self.embeddings_error = None
            self._peak_by_model.clear()

    def _pick(self, model: Any, body: dict[str, Any] | None = None) -> Reply | None:
        with self._lock:
            responder = self._responders.get(model) if isinstance(model, str) else None
        if responder is not None and body is not None:
            chosen = responder(body)
            if chosen is not None:
                return chosen
        with self._lock:
            queue = self._queues.get(model) if isinstance(model, str) else None
            if queue:
                return queue.popleft()
            reply = self._defaults.get(model) if isinstance(model, str) else None
        if reply is not None:
            return reply
        if model == ECHO_MODEL or self.default_echo:
            return _ECHO_REPLY
        return None

    def _known_models(self) -> list[str]:
        with self._lock:
            names = set(self._queues) | set(self._defaults)
        names.add(ECHO_MODEL)
        return sorted(names)

    # ------------------------------------------------------------------ observation

    @property
    def requests(self) -> list[RecordedRequest]:
        """Snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def model_calls(self) -> list[RecordedRequest]:
        """The requests that asked a model for an answer, in arrival order: not the listings
        (`GET /v1/models`, which a gateway reads for a context window it learns once per
        process) nor tokenizer calls, whose presence depends on what ran before."""
        return [r for r in self.requests if r.method == "POST" and r.path in _MODEL_CALL_PATHS]

    @property
    def aborted(self) -> list[tuple[float, int]]:
        """``(time.monotonic(), request_index)`` for every client abort seen."""
        with self._lock:
            return list(self._aborted)

    @property
    def active_streams(self) -> int:
        """Streaming responses currently in progress (including their pre-header delay)."""
        with self._lock:
            return self._active_streams

    def active_streams_of(self, model: str) -> int:
        """Streams of `model` in progress now."""
        with self._lock:
            return self._active_by_model.get(model, 0)

    def peak_streams_of(self, model: str) -> int:
        """The most streams of `model` in progress at once since the last reset."""
        with self._lock:
            return self._peak_by_model.get(model, 0)

    def wait_aborted(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` aborts were recorded; False on timeout."""
        with self._aborted_cond:
            return self._aborted_cond.wait_for(lambda: len(self._aborted) >= count, timeout)

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests) - 1

    def _record_abort(self, index: int) -> None:
        with self._aborted_cond:
            self._aborted.append((time.monotonic(), index))
            self._aborted_cond.notify_all()

    def _add_active(self, delta: int, model: Any = None) -> None:
        with self._lock:
            self._active_streams += delta
            if isinstance(model, str):
                now = self._active_by_model[model] = self._active_by_model.get(model, 0) + delta
                self._peak_by_model[model] = max(self._peak_by_model.get(model, 0), now)

    # ------------------------------------------------------------------ ASGI app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not part of the protocol
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        method: str = scope["method"]
        path: str = scope["path"]
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:
            name, val = key.decode("latin-1").lower(), value.decode("latin-1")
            headers[name] = f"{headers[name]}, {val}" if name in headers else val

        body: dict[str, Any] = {}
        bad_json = False
        if raw:
            try:
                parsed = json.loads(raw)
                body = parsed if isinstance(parsed, dict) else {}
                bad_json = not isinstance(parsed, dict)
            except ValueError:
                bad_json = True
        index = self._record(RecordedRequest(path=path, headers=headers, body=body, method=method))

        if method == "POST" and path == "/v1/chat/completions":
            if bad_json:
                await self._send_json(send, 400, _error("request body is not a JSON object", "invalid_request_error"))
                return
            problem = self._refused(body)
            if problem:
                await self._send_json(send, 400, _error(problem, "invalid_request_error"))
                return
            await self._chat(body, index, receive, send)
        elif method == "POST" and path == "/v1/responses":
            # The Responses dialect (provider kind `responses`): the same scripted replies.
            problem = self._refused(body)
            if problem:
                await self._send_json(send, 400, _error(problem, "invalid_request_error"))
                return
            await self._chat(_responses_as_chat(body), index, receive, send, dialect="responses")
        elif method == "POST" and path == "/v1/messages/count_tokens":
            # Anthropic's token counting: deterministic here (a token per 4 characters of the
            # messages and system), its key and version checked as for /v1/messages.
            if "x-api-key" not in headers or "anthropic-version" not in headers:
                await self._send_json(
                    send, 401, {"type": "error", "error": {"type": "authentication_error", "message": "no key"}}
                )
                return
            counted = json.dumps([body.get("system"), body.get("messages"), body.get("tools")])
            await self._send_json(send, 200, {"input_tokens": len(counted) // 4})
        elif method == "POST" and path == "/v1/messages":
            # Anthropic's Messages dialect (provider kind `anthropic`): the same scripted replies,
            # once the fields Anthropic checks are as it accepts them.
            problem = self._refused(body) or _messages_problem(body, headers)
            if problem:
                await self._send_json(
                    send, 400, {"type": "error", "error": {"type": "invalid_request_error", "message": problem}}
                )
                return
            await self._chat(_messages_as_chat(body), index, receive, send, dialect="anthropic")
        elif method == "GET" and path == "/v1/models":
            created = int(time.time())
            data = [
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "scripted-upstream",
                    **self.model_info.get(name, {}),
                }
                for name in self._known_models()
            ]
            await self._send_json(send, 200, {"object": "list", "data": data})
        elif method == "POST" and path == "/v1/embeddings" and self.embeddings_error is not None:
            await self._send_json(send, *self.embeddings_error)
        elif method == "POST" and path == "/v1/embeddings":
            # Deterministic 4-dimensional vectors; 1 token per word. A model named `bow-...`:
            # bag-of-words vectors (words_vector), so texts sharing words are near each other.
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else texts if isinstance(texts, list) else []
            words = str(body.get("model", "")).startswith("bow-")
            data = [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": words_vector(str(t))
                    if words
                    else [len(str(t)) / 10, i / 10, 0.5, float(str(t).count(" "))],
                }
                for i, t in enumerate(texts)
            ]
            tokens = sum(len(str(t).split()) for t in texts)
            await self._send_json(
                send,
                200,
                {
                    "object": "list",
                    "data": data,
                    "model": body.get("model"),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )
        elif method == "POST" and path == "/apply-template" and self.tokenizer == "llama.cpp":
            # llama.cpp: the model's chat template; like SmolLM2's, it drops `tools`.
            messages = body.get("messages") or []
            prompt = "".join(
                f"<|im_start|>{m['role']}\n{_message_text(m.get('content'))}<|im_end|>\n" for m in messages
            )
            await self._send_json(send, 200, {"prompt": prompt + "<|im_start|>assistant\n"})
        elif method == "POST" and path == "/tokenize" and self.tokenizer == "llama.cpp":
            # llama.cpp: text only (one token per 4 characters here); messages give no tokens.
            content = body.get("content")
            ids = list(range(len(content) // 4)) if isinstance(content, str) else []
            await self._send_json(send, 200, {"tokens": ids})
        elif method == "POST" and path == "/tokenize" and self.tokenizer:
            messages = body.get("messages") or []
            chars = sum(len(json.dumps(m.get("content"))) for m in messages if isinstance(m, dict))
            await self._send_json(send, 200, {"count": chars // 3 + 3 * len(messages), "max_model_len": 4096})
        else:
            await self._send_json(
                send,
                404,
                _error(f"no route for {method} {path}", "invalid_request_error", "not_found"),
            )

    def _refused(self, body: dict[str, Any]) -> str | None:
        refused = sorted(name for name in self.refused_fields if name in body)
        return f"{refused[0]}: Extra inputs are not permitted" if refused else None

    @staticmethod
    async def _send_json(
        send: Send, status: int, payload: dict[str, Any] | str, extra_headers: dict[str, str] | None = None
    ) -> None:
        data = payload.encode() if isinstance(payload, str) else _dumps(payload).encode()
        headers = [
            *_JSON_HEADERS,
            (b"content-length", str(len(data)).encode()),
            *((k.encode(), v.encode()) for k, v in (extra_headers or {}).items()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _chat(
        self, body: dict[str, Any], index: int, receive: Receive, send: Send, dialect: str = "chat"
    ) -> None:
        model = body.get("model")
        reply = self._pick(model, body)
        if reply is None:
            await self._send_json(
                send,
                404,
                _error(f"model {model} not scripted", "invalid_request_error", "model_not_found"),
            )
            return
        stream = bool(body.get("stream"))
        delay = self.latency + reply.delay
        # Only pay for a watcher task when there is time for the client to leave.
        watch = _DisconnectWatch(receive) if (stream or delay > 0) else None
        if stream:
            self._add_active(1, model)
        try:
            if watch is not None and delay > 0 and await watch.sleep(delay):
                self._record_abort(index)
                return
            if reply.status != 200:
                error_body = reply.error_body or _error("scripted failure", "server_error")
                if watch is not None:
                    watch.finished = True
                await self._send_json(send, reply.status, error_body, reply.error_headers)
            elif stream:
                assert watch is not None
                await self._stream(body, reply, index, watch, send, dialect)
            else:
                if watch is not None:
                    watch.finished = True
                payload = (
                    reply.raw_body
                    if reply.raw_body is not None
                    else self._response_object(body, reply)
                    if dialect == "responses"
                    else self._anthropic_message(body, reply)
                    if dialect == "anthropic"
                    else self._completion(body, reply)
                )
                await self._send_json(send, 200, payload)
        finally:
            if watch is not None:
                watch.close()
            if stream:
                self._add_active(-1, model)

    @staticmethod
    def _resolve(body: dict[str, Any], reply: Reply) -> tuple[str | None, list[dict[str, Any]], str]:
        text = _echo_text(body) if reply.echo else reply.text
        calls = _normalize_tool_calls(reply.tool_calls) if reply.tool_calls else []
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        return text, calls, finish

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        text, calls, finish = self._resolve(body, reply)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reply.refusal is not None:
            message["refusal"] = reply.refusal
        if reply.reasoning is not None:
            message[reply.reasoning_field] = reply.reasoning
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": reply.usage if reply.usage is not None else _usage(body, text, reply.reasoning),
        }

    def _response_object(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """The Responses dialect's whole answer: a Response object."""
        text, calls, finish = self._resolve(body, reply)
        output: list[dict[str, Any]] = []
        if reply.reasoning:
            output.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{uuid.uuid4().hex}",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": reply.reasoning}],
                }
            )
        parts = ([{"type": "output_text", "text": text, "annotations": []}] if text else []) + (
            [{"type": "refusal", "refusal": reply.refusal}] if reply.refusal else []
        )
        if parts:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex}",
                    "role": "assistant",
                    "status": "completed",
                    "content": parts,
                }
            )
        for call in calls:
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex}",
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                    "status": "completed",
                }
            )
        usage = reply.usage if reply.usage is not None else _usage(body, text, reply.reasoning)
        return {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model"),
            "status": "incomplete" if finish == "length" else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if finish == "length" else None,
            "output": output,
            "usage": _responses_usage(usage),
            **(reply.response_fields or {}),
        }

    def _anthropic_message(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """Anthropic's Messages answer: content blocks, a stop reason, usage without cache in input."""
        text, calls, finish = self._resolve(body, reply)
        blocks: list[dict[str, Any]] = []
        if reply.reasoning:
            blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": "sig-" + uuid.uuid4().hex})
        if text:
            blocks.append({"type": "text", "text": text})
        for call in calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "input": json.loads(call["function"]["arguments"] or "{}"),
                }
            )
        usage = reply.usage if reply.usage is not None else _usage(body, text, reply.reasoning)
        if "prompt_tokens" in usage:
            usage = {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]}
        stop = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}.get(
            finish, finish
        )
        return {
            "id": f"msg_{uuid.uuid4().hex}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def _anthropic_events(self, body: dict[str, Any], reply: Reply) -> tuple[list[bytes], bool]:
        if reply.raw_chunks is not None:
            return [
                (f"event: {c['type']}\n".encode() if isinstance(c, dict) else b"") + _sse(c) for c in reply.raw_chunks
            ], False
        final = self._anthropic_message(body, reply)
        usage = final["usage"]
        start_usage = {**usage, "output_tokens": 1}
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": {**final, "content": [], "stop_reason": None, "usage": start_usage}}
        ]
        size = reply.chunk_chars
        for index, block in enumerate(final["content"]):
            if block["type"] == "thinking":
                events.append(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "thinking", "thinking": ""},
                    }
                )
                events += [
                    {"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": p}}
                    for p in _pieces(block["thinking"], size)
                ]
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": block["signature"]},
                    }
                )
            elif block["type"] == "text":
                events.append(
                    {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
                )
                events.append({"type": "ping"})
                events += [
                    {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}
                    for p in _pieces(block["text"], size)
                ]
            else:
                events.append(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
                    }
                )
                events += [
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": p},
                    }
                    for p in _pieces(json.dumps(block["input"]), size)
                ]
            events.append({"type": "content_block_stop", "index": index})
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": final["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage.get("output_tokens", 0)},
            }
        )
        events.append({"type": "message_stop"})
        return [f"event: {e['type']}\n".encode() + _sse(e) for e in events], False

    def _responses_events(self, body: dict[str, Any], reply: Reply) -> tuple[list[bytes], bool]:
        """The Responses dialect's stream: typed events, numbered; no [DONE]."""
        if reply.raw_chunks is not None:
            return [_sse(c) for c in reply.raw_chunks], reply.raw_done
        final = self._response_object(body, reply)
        shell = {**final, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": shell},
            {"type": "response.in_progress", "response": shell},
        ]
        size = reply.chunk_chars
        for index, item in enumerate(final["output"]):
            if item["type"] == "function_call":
                events.append(
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": {**item, "arguments": "", "status": "in_progress"},
                    }
                )
                events += [
                    {
                        "type": "response.function_call_arguments.delta",
                        "output_index": index,
                        "item_id": item["id"],
                        "delta": p,
                    }
                    for p in _pieces(item["arguments"], size)
                ]
                events.append(
                    {
                        "type": "response.function_call_arguments.done",
                        "output_index": index,
                        "item_id": item["id"],
                        "arguments": item["arguments"],
                    }
                )
            elif item["type"] == "reasoning":
                events.append(
                    {"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}}
                )
                events += [
                    {
                        "type": "response.reasoning_text.delta",
                        "output_index": index,
                        "content_index": 0,
                        "item_id": item["id"],
                        "delta": p,
                    }
                    for p in _pieces(item["content"][0]["text"], size)
                ]
            else:
                events.append(
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": {**item, "content": [], "status": "in_progress"},
                    }
                )
                for part_index, part in enumerate(item["content"]):
                    kind = "output_text" if part["type"] == "output_text" else "refusal"
                    events.append(
                        {
                            "type": "response.content_part.added",
                            "output_index": index,
                            "content_index": part_index,
                            "item_id": item["id"],
                            "part": {**part, kind if kind == "refusal" else "text": ""},
                        }
                    )
                    events += [
                        {
                            "type": f"response.{kind}.delta",
                            "output_index": index,
                            "content_index": part_index,
                            "item_id": item["id"],
                            "delta": p,
                        }
                        for p in _pieces(part["text" if kind == "output_text" else "refusal"], size)
                    ]
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append({"type": f"response.{final['status']}", "response": final})
        for number, event in enumerate(events):
            event["sequence_number"] = number
        return [f"event: {e['type']}\n".encode() + _sse(e) for e in events], False

    def _stream_events(self, body: dict[str, Any], reply: Reply) -> tuple[list[bytes], bool]:
        """All data events of a streamed reply (without [DONE]) and whether to send [DONE]."""
        if reply.raw_chunks is not None:
            return [_sse(c) for c in reply.raw_chunks], reply.raw_done

        text, calls, finish = self._resolve(body, reply)
        stream_options = body.get("stream_options")
        requested_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
        include_usage = requested_usage if reply.include_usage_chunk is None else reply.include_usage_chunk
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model"),
        }
        # Serialize the constant envelope once and splice deltas in: keeps the
        # per-chunk cost to one small json.dumps (this server is a benchmark upstream).
        head = b"data: " + _dumps(base).encode()[:-1] + b',"choices":[{"index":0,"delta":'
        # OpenAI sends "usage": null on every chunk when include_usage is on.
        tail = b',"usage":null}\n\n' if include_usage else b"}\n\n"

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            return head + _dumps(delta).encode() + b',"finish_reason":' + _dumps(finish_reason).encode() + b"}]" + tail

        size = reply.chunk_chars
        events = [chunk({"role": "assistant", "content": ""})]
        if reply.reasoning:
            events += [chunk({reply.reasoning_field: p}) for p in _pieces(reply.reasoning, size)]
        if text:
            events += [chunk({"content": p}) for p in _pieces(text, size)]
        if reply.refusal:
            events += [chunk({"refusal": p}) for p in _pieces(reply.refusal, size)]

        per_call: list[list[bytes]] = []
        for i, call in enumerate(calls):
            fn = call["function"]
            header = {
                "index": i,
                "id": call["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": ""},
            }
            seq = [chunk({"tool_calls": [header]})]
            seq += [
                chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                for p in _pieces(fn["arguments"], size)
            ]
            per_call.append(seq)
        if reply.interleave_tool_calls:
            longest = max((len(s) for s in per_call), default=0)
            events += [s[k] for k in range(longest) for s in per_call if k < len(s)]
        else:
            events += [e for s in per_call for e in s]

        events.append(chunk({}, finish))
        if include_usage:
            usage = reply.usage if reply.usage is not None else _usage(body, text, reply.reasoning)
            events.append(_sse({**base, "choices": [], "usage": usage}))
        return events, True

    async def _stream(
        self,
        body: dict[str, Any],
        reply: Reply,
        index: int,
        watch: _DisconnectWatch,
        send: Send,
        dialect: str = "chat",
    ) -> None:
        events, send_done = (
            self._responses_events(body, reply)
            if dialect == "responses"
            else self._anthropic_events(body, reply)
            if dialect == "anthropic"
            else self._stream_events(body, reply)
        )
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})

        async def emit(data: bytes) -> bool:
            """Send one event; False if the client is gone (abort recorded)."""
            try:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            except OSError:
                watch.event.set()
            if watch.disconnected:
                self._record_abort(index)
                return False
            return True

        malformed_pending = reply.malformed_after is not None
        for sent, event in enumerate(events):
            if reply.disconnect_after is not None and sent >= reply.disconnect_after:
                raise _AbruptClose
            if malformed_pending and sent >= (reply.malformed_after or 0):
                malformed_pending = False
                if not await emit(_MALFORMED_EVENT):
                    return
            if sent and reply.interval > 0:
                if await watch.sleep(reply.interval):
                    self._record_abort(index)
                    return
            elif watch.disconnected:
                self._record_abort(index)
                return
            if not await emit(event):
                return
            if reply.interval <= 0 and sent % 8 == 7:
                # Yield now and then so connection_lost / the watcher can run;
                # not on every chunk, which costs ~30% of streaming throughput.
                await asyncio.sleep(0)
        # disconnect_after beyond the last chunk still means "never finish properly".
        if reply.disconnect_after is not None:
            raise _AbruptClose
        if malformed_pending and not await emit(_MALFORMED_EVENT):
            return
        watch.finished = True
        await send(
            {
                "type": "http.response.body",
                "body": _DONE_EVENT if send_done else b"",
                "more_body": False,
            }
        )


def main(argv: Iterable[str] | None = None) -> None:
    """CLI entry point: foreground echo server for benchmarks."""
    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible upstream (echo mode).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds of delay before every reply")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(list(argv) if argv is not None else None)
    upstream = ScriptedUpstream(host=args.host, port=args.port, latency=args.latency, default_echo=True)
    upstream.run(log_level=args.log_level)


if __name__ == "__main__":
    main()
