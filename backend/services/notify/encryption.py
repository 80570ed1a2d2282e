"""A push message's payload encrypted for the browser that subscribed (RFC 8291, in RFC
8188's `aes128gcm` content coding) by `http_ece`, the encoder pywebpush itself uses: the
cryptography is a well-kept library's, never ours. A new key pair is made for every
message, as RFC 8291 requires; a payload (at most 4 KB, see messages.MAX_PUSH_BYTES) is one
record."""

import os

import http_ece  # type: ignore[import-untyped]
from cryptography.hazmat.primitives.asymmetric import ec

from backend.services.notify.keys import b64url_decode

RECORD_SIZE = 4096
_OVERHEAD = 17  # a record's delimiter byte and its 16-byte AEAD tag


def encrypt(plaintext: bytes, *, p256dh: str, auth: str) -> bytes:
    """The request body of a push message: the RFC 8188 header (salt, record size, the
    sender's one-time public key), then the one encrypted record. ValueError for keys a
    browser would not send, or a payload too long for one record."""
    if len(plaintext) + _OVERHEAD > RECORD_SIZE:
        raise ValueError("a push payload must fit in one record")
    body: bytes = http_ece.encrypt(  # ValueError (from cryptography) for a key off the curve
        plaintext,
        salt=os.urandom(16),
        private_key=ec.generate_private_key(ec.SECP256R1()),
        dh=b64url_decode(p256dh),
        auth_secret=b64url_decode(auth),
        version="aes128gcm",
        rs=RECORD_SIZE,
    )
    return body
