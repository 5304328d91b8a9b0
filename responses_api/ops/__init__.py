"""Operator tooling outside the request path: the config file sync, the bundled local model, and
the child-process helpers (processes.py) it shares with the supervisor, the tests and the benchmarks."""
