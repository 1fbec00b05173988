"""A `redis.asyncio` client built from settings (ACL user/password, TLS via rediss://), bytes in and out.

Usage::

    redis = connect_redis(settings.redis)
    try:
        store = SnapshotStore(redis, Snapshot)
        ...
    finally:
        await redis.aclose()
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shoal.errors import PermanentError, ShoalError, TransientError
from shoal.retry import RetryPolicy, retry_transient
from shoal.settings import RedisSettings

REDIS_RETRY = RetryPolicy(attempts=4, initial_s=0.05, max_backoff_s=1.0, max_elapsed_s=10.0)


def connect_redis(settings: RedisSettings) -> Redis:
    """A lazily connecting client; `decode_responses` is off so msgpack blobs stay bytes. Its pool holds at
    most `max_connections`; a call beyond that waits for one (up to `pool_timeout_s`) instead of failing at
    once, so a burst of concurrent binds queues on the pool rather than losing a plan."""
    kwargs: dict[str, Any] = {
        "decode_responses": False,
        "socket_connect_timeout": 5,
        "socket_timeout": 30,
        "health_check_interval": 30,
    }
    if settings.username:
        kwargs["username"] = settings.username
    if settings.password:
        kwargs["password"] = settings.password
    if settings.url.startswith("rediss://"):
        kwargs.update(ssl_ca_certs=settings.ssl_cafile, ssl_certfile=settings.ssl_certfile,
                      ssl_keyfile=settings.ssl_keyfile)
    pool = BlockingConnectionPool.from_url(settings.url, max_connections=settings.max_connections,
                                           timeout=settings.pool_timeout_s, **kwargs)
    return Redis.from_pool(pool)  # closing the client closes its pool


def redis_error(exc: BaseException) -> ShoalError:
    """Connection problems, timeouts and TRYAGAIN are transient; other Redis errors are permanent, and so are
    rejected credentials and an untrusted certificate (redis-py raises those as connection errors)."""
    if isinstance(exc, AuthenticationError | AuthenticationWrongNumberOfArgsError):
        return PermanentError(f"redis: the server rejected the credentials ({exc}); check SHOAL_REDIS_USERNAME and "
                              "SHOAL_REDIS_PASSWORD")
    if isinstance(exc.__cause__ or exc.__context__, ssl.SSLCertVerificationError) or \
            "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return PermanentError(f"redis: the server's certificate is not trusted ({exc}); set SHOAL_REDIS_SSL_CAFILE "
                              "to the CA that signed it")
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | TryAgainError | ConnectionError | TimeoutError):
        return TransientError(f"redis: {exc}")
    if isinstance(exc, RedisError):
        return PermanentError(f"redis: {exc}")
    return PermanentError(f"redis: {type(exc).__name__}: {exc}")


async def ping(redis: Redis) -> None:
    """PING once with the error mapping, no retry (start-up checks, /readyz)."""
    try:
        await redis.ping()
    except (RedisError, OSError) as exc:
        raise redis_error(exc) from exc


async def redis_ready(redis: Redis) -> bool:
    """For /readyz: True when Redis answers PING."""
    try:
        await ping(redis)
    except ShoalError:
        return False
    return True


async def redis_call(what: str, operation: Callable[[], Awaitable[Any]]) -> Any:
    """Run an idempotent Redis operation with Shoal's error mapping, retrying transient failures."""

    async def mapped() -> Any:
        try:
            return await operation()
        except (RedisError, OSError) as exc:
            raise redis_error(exc) from exc

    return await retry_transient(mapped, policy=REDIS_RETRY, what=what)
