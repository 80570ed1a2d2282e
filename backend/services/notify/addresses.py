"""No request to where it must not go: a URL a person gave (a push endpoint, an ntfy topic)
is resolved, and refused when any of its addresses is loopback, private, link-local,
reserved or otherwise not public, unless its host is one the operator allows
(NOTIFY_ALLOWED_HOSTS). Checked when it is saved, and again at each send on the very
address connected to: the request goes to the checked IP, with the Host header and the TLS
server name (SNI, and the certificate's check) of the URL's host. Redirects are never
followed."""

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from backend.errors import DomainError

RESOLVE_TIMEOUT_S = 5.0


class AddressRefused(DomainError):
    status_code = 422
    detail = "That address cannot be used."


@dataclass(frozen=True, slots=True)
class Target:
    """Where a checked URL's request goes: the URL to connect to and what to send as its
    Host and TLS server name."""

    url: str
    host_header: str | None
    server_name: str | None


class AddressGuard:
    def __init__(self, *, allowed_hosts: list[str], https_only: bool) -> None:
        self._allowed = {host.strip().lower().strip("[]") for host in allowed_hosts if host}
        self._https_only = https_only

    def check_form(self, url: str) -> tuple[str, str, int]:
        """The URL's scheme, host and port, or AddressRefused when its form is refused."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise AddressRefused("That URL cannot be read.") from error
        host = (parts.hostname or "").lower()
        # In production only https, but for a host the operator allows (a push or ntfy
        # server on a private network may speak plain http).
        https_only = self._https_only and host not in self._allowed
        schemes = ("https",) if https_only else ("https", "http")
        if parts.scheme not in schemes:
            raise AddressRefused(f"Only {' or '.join(schemes)} URLs are accepted.")
        if not host or parts.username or parts.password:
            raise AddressRefused("That URL has no host, or carries a user name.")
        return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)

    async def check(self, url: str) -> Target:
        """Where to send a request for `url`, refusing it (AddressRefused) when it resolves
        to an address that is not public and its host is not allowed."""
        scheme, host, port = self.check_form(url)
        if host in self._allowed:
            return Target(url=url, host_header=None, server_name=None)
        addresses = await _resolve(host, port)
        refused = [address for address in addresses if not _public(address)]
        if refused or not addresses:
            shown = refused[0] if refused else "none"
            raise AddressRefused(f"{host} points at an address that is not public ({shown}).")
        chosen = addresses[0]
        literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
        parts = urlsplit(url)
        default_port = port == (443 if scheme == "https" else 80)
        netloc = literal if default_port else f"{literal}:{port}"
        direct = parts._replace(netloc=netloc).geturl()
        host_header = parts.netloc.rpartition("@")[2]
        return Target(
            url=direct, host_header=host_header, server_name=host if scheme == "https" else None
        )


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


async def _resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        raise AddressRefused(f"{host} cannot be resolved.") from None  # not a database error
    seen: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in seen:
            seen.append(address)
    return seen
