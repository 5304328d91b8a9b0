"""From a parsed request to a run: admission (routes, sealed input, rate limits), tool planning,
run assembly, the hand-off to a worker and the worker's side, compaction and token counts, a
process's drain and liveness."""
