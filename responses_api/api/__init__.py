"""The wire: ASGI fast lane, DRF views and policies, SSE and WebSocket, middleware, errors, health, the docs."""
