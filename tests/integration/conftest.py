"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from redis.asyncio import Redis

from shoal.adapters.redis_client import connect_redis
from shoal.settings import RedisSettings


@pytest_asyncio.fixture
async def redis(stack: Any) -> AsyncIterator[Redis]:
    """A client of the suite's real Redis (a test file may shadow it, e.g. with a database of its own)."""
    client = connect_redis(RedisSettings(url=stack.redis_url))
    try:
        yield client
    finally:
        await client.aclose()
