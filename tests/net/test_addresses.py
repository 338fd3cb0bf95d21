"""Which addresses count as public, form by form, and URL checks end to end through
the system resolver (which reads decimal, octal and hex IPv4 hosts as addresses)."""

from __future__ import annotations

import pytest

from parlance.net.addresses import is_public_address
from parlance.net.guard import NON_PUBLIC, RefusedURL, check_url

PUBLIC = [
    "93.184.216.34",
    "8.8.8.8",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",  # IPv4-mapped: judged as its IPv4
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]

NOT_PUBLIC = [
    "127.0.0.1", "127.255.0.9", "0.0.0.0", "10.1.2.3", "172.16.0.1", "192.168.1.1",
    "169.254.169.254", "100.64.0.1", "224.0.0.1", "240.0.0.1", "255.255.255.255",
    "::1", "::", "fe80::1", "fe80::1%eth0", "fc00::1", "fd12:3456::1", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
    "::127.0.0.1", "::7f00:1", "::10.0.0.1", "::169.254.169.254",  # IPv4-compatible
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::c0a8:101",  # NAT64
    "64:ff9b:1::7f00:1", "64:ff9b:1::808:808",  # local-use NAT64: never public
    "2002:7f00:1::", "2002:a9fe:a9fe::1", "2002:c0a8:101::",  # 6to4
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1 (obfuscated)
    "2001:0:4136:e378:8000:63bf:f7f7:f7f7",  # Teredo, client 8.8.8.8 (server public)
    "2001:0:a00:1:8000:63bf:f7f7:f7f7",  # Teredo, server 10.0.0.1
    "fec0::1", "feff::1",  # site-local
]


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses(address: str) -> None:
    assert is_public_address(address)


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_non_public_addresses(address: str) -> None:
    assert not is_public_address(address)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://localhost:8080/x", "http://2130706433/", "http://0x7f.1/",
    "http://0177.0.0.1/", "http://0x7f000001/", "http://127.1/", "http://[::1]/",
    "http://[::127.0.0.1]/", "http://[::ffff:127.0.0.1]/", "https://169.254.169.254/latest",
    "http://[64:ff9b::7f00:1]/", "http://[2002:7f00:1::]/", "http://[fec0::1]/",
    "http://0/",
])
async def test_urls_reaching_non_public_addresses_are_refused(url: str) -> None:
    with pytest.raises(RefusedURL, match=NON_PUBLIC):
        await check_url(url, ())


async def test_allow_listed_hosts_and_public_literals_pass() -> None:
    await check_url("http://127.0.0.1:9/m.gguf", ("127.0.0.1",))
    await check_url("http://[::1]/", ("::1",))
    await check_url("http://LOCALHOST/", ("localhost",))
    await check_url("https://93.184.216.34/m.gguf", ())
    await check_url("http://[2606:4700:4700::1111]/", ())


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://example.org/m.gguf", "http"), ("file:///etc/passwd", "http"),
    ("http:///m.gguf", "http"), ("http://127.0.0.1:99999/", "port"),
    ("http://no-such-host.invalid/", "could not be resolved"),
])
async def test_malformed_urls_are_refused(url: str, why: str) -> None:
    with pytest.raises(RefusedURL, match=why):
        await check_url(url, ())
