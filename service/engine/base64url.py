"""URL-safe base64 without padding, the letters of the tokens this server issues.

Base64 leaves a few bits of a text's last letter unused, so several texts decode to the same
bytes; ``decode`` accepts only the one ``encode`` writes, so a token passed back "unchanged" means
the same letters, not merely the same bytes.
"""

from __future__ import annotations

import base64
import binascii


def encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def decode(text: str) -> bytes:
    """The bytes ``text`` spells; ValueError when it is not how ``encode`` spells them."""
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as error:
        raise ValueError(str(error)) from None
    if encode(data) != text:
        raise ValueError("not the canonical spelling of its bytes")
    return data
