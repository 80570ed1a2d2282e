"""The TLS context of the service's outgoing HTTP clients."""

import ssl
from functools import cache

import httpx


@cache
def client_tls() -> ssl.SSLContext:
    """httpx's default context (certifi's authorities, certificates verified), built once
    per process: each client that builds its own loads the authorities again, a quarter of
    a second of CPU on a busy machine, and an app makes several clients as it starts (the
    tests start hundreds of apps). Shared safely: none of them speaks HTTP/2, so the
    protocols httpcore sets on it as it connects are always HTTP/1.1's."""
    return httpx.create_ssl_context()
