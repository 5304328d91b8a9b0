"""From a parsed request to a run: routes, rate limits, tool planning, run assembly, the worker hand-off decision."""
