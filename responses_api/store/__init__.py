"""The database and Redis side: writes (services), reads (selectors), what a run stores
(persistence), usage records, the thread hop (db), the Redis clients and the Redis-backed stores
(event log, limit counters, router health), infrastructure outages, sealing of values given back
to clients, and the one in-process cache (ttlcache)."""
