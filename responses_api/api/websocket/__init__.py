"""WebSocket mode of `/v1/responses` (Open Responses 2026-04-24; lanes and steering as the openai
SDK 3.57 defines them).

A connection authenticates at the handshake, then carries `response.create` messages, each of
which looks its key up again (auth.py's key cache: a dict look-up), so a key that expires is
refused at once and a revoked or regenerated one within GATEWAY_CACHE_SECONDS, as over HTTP: the
create gets the handshake's 401 as an error frame and the connection closes (policy violation,
1008), its running responses cancelled; each create also gets the key's current limits and budgets;
the server answers each with the same event objects the SSE stream carries, one JSON text
message per event, and no `[DONE]`. Creates run on lanes: those with the same `stream_id` (none:
the default lane) run first in, first out, one after the other; different lanes run at once, and
every event of a named lane's response (and the error frame of its create) echoes its
`stream_id`. Each lane keeps its most recent response in memory (`PriorContext`), so a
continuation with `previous_response_id` needs no chain read, `store: false` chains continue on
the socket, and a lane may continue (fork) another lane's response; a continuation that fails
forgets its parent in its own lane only. A lane also keeps its last model call's context in the
upstream's dialect (protocol/prefix.py), which only its own continuation of its head reuses.
`response.steer` queues user input into a running response (steering.py): the response stops at
a safe boundary (engine/steering.py) and a successor, chained to it, commits the input. Errors
that stop a create before its response exists are `{"type": "error", "status", "error"}`
envelopes; the connection stays open.

It is served by the same ASGI entry as the HTTP API and drives the same engine
(`gateway.start_response`, `ResponseRun.events`); each response is admitted (rate limits,
concurrency slot) as an HTTP request is. Limits (settings): a connection lasts at most
GATEWAY_WS_MAX_SECONDS (60 min, then `websocket_connection_limit_reached`), is closed after
GATEWAY_WS_IDLE_SECONDS without a message while nothing runs, takes messages up to
GATEWAY_MAX_REQUEST_BYTES, holds at most GATEWAY_WS_MAX_QUEUED_MESSAGES / _BYTES of creates
waiting (in all lanes together), runs at most GATEWAY_WS_MAX_ACTIVE_RESPONSES responses at once
(the others wait), names at most GATEWAY_WS_MAX_STREAMS lanes (`websocket_stream_limit_reached`),
queues at most GATEWAY_WS_MAX_PENDING_STEERS steering inputs per response (and _QUEUED_BYTES
of them per connection), and a key holds at
most GATEWAY_WS_MAX_CONNECTIONS_PER_KEY connections per web process. Each create writes an
access-log line and counts in the request metrics, as an HTTP request does; a drain (SIGTERM,
orchestration/lifecycle.py) closes the connection after its running responses.

One module per job: handshake.py (the handshake and the per-key limit), connection.py (reading,
the connection's end), messages.py (the `{message type: handler}` table), frames.py (framing and
the per-message limits), lanes.py (lanes, slots, queue bounds), steers.py (steering and its
hand-back), context.py (prior context and the prefix cache), turns.py (one response, and the one
call of `gateway.start_response`), access_log.py (each turn's access-log line and metrics).
"""

from .access_log import WEBSOCKET_ROUTE
from .connection import Connection
from .frames import error_envelope, peek_stream_id
from .handshake import handshake_headers, serve

__all__ = ["WEBSOCKET_ROUTE", "Connection", "error_envelope", "handshake_headers", "peek_stream_id", "serve"]
