"""The database side: writes (services), reads (selectors), what a run stores (persistence), the thread
hop (db), sealing of values given back to clients, and the TTL cache of hot look-ups."""
