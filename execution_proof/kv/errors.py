"""Which Redis failures mean "the store is unavailable" (503), in one place for every caller."""

from __future__ import annotations

from redis import exceptions as redis_errors

UNAVAILABLE_ERRORS = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.BusyLoadingError,
    redis_errors.ReadOnlyError,
    redis_errors.OutOfMemoryError,  # maxmemory reached with noeviction: refuse, never evict (docs/redis.md)
    OSError,
    # Redis Cluster (REDIS_CLUSTER=true): no reachable node, slots not covered, cluster down
    # or a slot migrating (TRYAGAIN), redirections exhausted. Transient: 503, not 500.
    redis_errors.RedisClusterException,
    redis_errors.ClusterError,
    redis_errors.TryAgainError,
)
