"""Public object ids: a type prefix and 48 random hex digits, like OpenAI's."""

import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"
