"""Running one response to its end (run.py), whoever drives it (a view, a WebSocket, a worker),
with what it is given declared in interfaces.py, the model's context in context.py, a step's
tool calls in tools.py, target selection in router.py, an end the store refused in ending.py,
and tracing."""
