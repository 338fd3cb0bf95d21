"""Which IP addresses are public, i.e. safe to reach for a URL a client named.

Not public: loopback, private, link-local, shared, multicast, reserved and site-local
ranges, and IPv6 forms that carry an IPv4 address (IPv4-mapped and -compatible, NAT64,
6to4, Teredo) whose IPv4 is not public: a connection to those can reach that IPv4.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv6Address

_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # ::a.b.c.d (deprecated, still routed)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: the IPv4 is the low 32 bits
# RFC 8215 local-use NAT64: not globally reachable, and where the IPv4 sits depends on
# the prefix length the local network chose, so it cannot be read off reliably.
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")  # deprecated, but still private


def embedded_ipv4(ip: IPv6Address) -> tuple[IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries (a Teredo address carries two)."""
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if ip in _IPV4_COMPATIBLE or ip in _NAT64:
        return (IPv4Address(int(ip) & 0xFFFFFFFF),)
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:  # (server, client); `teredo` undoes the client's obfuscation
        return ip.teredo
    return ()


def _global(ip: IPv4Address | IPv6Address) -> bool:
    return ip.is_global and not ip.is_multicast


def is_public_address(address: str) -> bool:
    """Whether `address` (an IP literal, optionally with an IPv6 `%zone`) is public."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, IPv4Address):
        return _global(ip)
    if ip in _SITE_LOCAL or ip in _LOCAL_NAT64:
        return False
    embedded = embedded_ipv4(ip)
    if ip.ipv4_mapped is not None:  # the IPv4 address itself, in IPv6 clothing
        return _global(embedded[0])
    return all(_global(v4) for v4 in embedded) and _global(ip)


def host_listed(host: str, allowed_hosts: tuple[str, ...]) -> bool:
    """Whether the operator allow-listed `host` (case-insensitive; IPv6 with or without [])."""
    name = host.lower().strip("[]")
    return any(name == allowed.lower().strip("[]") for allowed in allowed_hosts)
