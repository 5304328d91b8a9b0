"""The /v1 Responses API: protocol core, engine, store, upstream adapters, views, tasks, admin."""
