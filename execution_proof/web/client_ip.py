"""Which client a request counts as, for per-IP limits (docs/limits.md, "Client address").

The socket peer, unless a trusted proxy header is configured: ``REAL_IP_HEADER`` (for
example ``Fly-Client-IP``) or ``X-Forwarded-For`` with ``PROXIES_COUNT`` trusted proxies.
A forwarded header that is not configured is ignored. A request that lacks the configured
header gets a bucket of its own (``noheader:<peer>``), never the proxy's shared one.
IPv6 clients are bucketed by /64, the block one subscriber usually gets.
"""

from __future__ import annotations

import functools
import ipaddress

from sanic import Request

from execution_proof.runtime.settings import ClientIpConfig


@functools.lru_cache(maxsize=8192)
def ip_bucket(text: str) -> str | None:
    """The canonical bucket for an address (IPv6 by /64), or None if it is not an address.
    Remembered for the 8,192 latest texts: parsing was about 10 us of every request."""
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def client_ip(request: Request, config: ClientIpConfig) -> str:
    """The bucket name of the request's client."""
    peer = ip_bucket(request.ip or "") or "unknown"
    if config.real_ip_header:
        value = request.headers.get(config.real_ip_header)
        found = ip_bucket(value) if value else None
        return found or f"noheader:{peer}"
    if config.proxies_count > 0:
        hops = [hop.strip() for value in request.headers.getall("x-forwarded-for", []) for hop in value.split(",")]
        hops = [hop for hop in hops if hop]
        found = ip_bucket(hops[-config.proxies_count]) if len(hops) >= config.proxies_count else None
        return found or f"noheader:{peer}"
    return peer


def _address(text: str | None) -> str | None:
    if not text:
        return None
    try:
        return str(ipaddress.ip_address(text.strip().strip("[]")))
    except ValueError:
        return None


def remote_ip(request: Request, config: ClientIpConfig) -> str | None:
    """The client's own address for ``remoteip`` (not the per-/64 limit bucket), or None.

    The same trust rules as ``web.client_ip``: a proxy header counts only when configured.
    """
    if config.real_ip_header:
        return _address(request.headers.get(config.real_ip_header))
    if config.proxies_count > 0:
        hops = [hop.strip() for value in request.headers.getall("x-forwarded-for", []) for hop in value.split(",")]
        hops = [hop for hop in hops if hop]
        return _address(hops[-config.proxies_count]) if len(hops) >= config.proxies_count else None
    return _address(request.ip)
