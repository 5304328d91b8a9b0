"""Celery tasks: thin, take ids, call the background service."""
from __future__ import annotations

import asyncio

from celery import shared_task


@shared_task(name="responses_api.run_response", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_response(response_id: str) -> str:
    from .background import run_claimed
    from .upstreams.http import close_client

    async def main() -> str:
        try:
            return await run_claimed(response_id)
        finally:
            await close_client()

    return asyncio.run(main())


@shared_task(name="responses_api.reap_stale_responses", ignore_result=True)
def reap_stale_responses() -> int:
    from .background import reap_stale

    return asyncio.run(reap_stale())
