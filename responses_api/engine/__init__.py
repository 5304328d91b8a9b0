"""Running one response to its end (run.py), in the web process or on a worker (background.py), with target
selection (router.py), the background event log (eventlog.py) and tracing."""
