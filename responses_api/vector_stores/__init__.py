"""Vector stores (`/v1/vector_stores`): a slice like conversations; its data in store/vector_stores.py."""
