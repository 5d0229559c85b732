"""Who sent a request: the peer's address, or what a trusted proxy says the client was.

X-Forwarded-For is whatever the client wrote, plus one entry per proxy it passed. Only the
entries appended by proxies we run can be believed, so the header is read only when the
peer itself is in TRUSTED_PROXY_CIDRS (empty by default: the header is ignored), and then
from the right, skipping trusted hops: the first untrusted address is the client. Anything
to the left of it was written by the client and is never looked at.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from django.conf import settings
from django.http import HttpRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    # A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d; compare them as IPv4.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_networks(entries: Iterable[str]) -> list[IPNetwork]:
    """Settings entries as networks; settings.py has already refused malformed ones."""
    return [ipaddress.ip_network(entry.strip(), strict=False) for entry in entries]


def in_networks(address: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(address in network for network in networks)


def client_address(request: HttpRequest) -> IPAddress | None:
    """The client's address, or None when it cannot be told (then nothing is granted by it)."""
    peer = parse_address(request.META.get("REMOTE_ADDR", ""))
    proxies = parse_networks(settings.TRUSTED_PROXY_CIDRS)
    if peer is None or not in_networks(peer, proxies):
        return peer
    hops = [hop for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    client = peer
    for hop in reversed(hops):
        parsed = parse_address(hop)
        if parsed is None:
            # A trusted proxy passed on a garbled entry: the client is unknown.
            return None
        client = parsed
        if not in_networks(client, proxies):
            break
    return client
