"""What the gateway tells its operators while it runs: Prometheus metrics (metrics.py)."""
