"""Operator tooling outside the request path: the config file sync and the bundled local model."""
