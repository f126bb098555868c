"""A webhook's URL, read once for both who use it: CreateWebhook refuses a URL (subscriptions.py
``validate_url``) for exactly what would make every delivery to it fail (sender.py ``post``), so
both read it with ``parse`` and a refusal names what is wrong instead of a delivery log filling
with the same error.

What the sender cannot send: a character a request line or a Host header cannot carry (C0
controls, space, DEL; C1 controls and anything else outside ASCII), a host name the resolver
cannot look up (an empty label, a label over 63 characters, a name over 253, characters outside
letters, digits, hyphens and underscores), an IPv6 zone (the connection drops it), a port outside
1-65535, and a user or password (a delivery sends none: the signature is its authentication).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, urlsplit

MAX_URL_CHARS = 2048
MAX_HOST_CHARS = 253  # DNS: 255 octets on the wire, less the length of the first label and the root
MAX_LABEL_CHARS = 63
_LABEL = re.compile(r"[a-z0-9_-]+")  # urlsplit's hostname is lowercase
_FORM = "give http(s)://host[:port]/path"


class UnusableURL(ValueError):
    """A URL no delivery can reach; its text says why, for the caller."""


@dataclass(frozen=True)
class Target:
    """Where and what a delivery sends: the host to resolve (an address literal without its
    brackets, or a lowercase name), the port to connect to, and the request line's target."""

    scheme: str
    host: str
    port: int
    path: str


def parse(url: str) -> Target:
    """The URL's target; raises ``UnusableURL`` naming the first thing no delivery could send."""
    if not url or len(url) > MAX_URL_CHARS:
        raise UnusableURL(f"url must be an absolute http:// or https:// URL of 1 to {MAX_URL_CHARS} characters")
    _check_controls(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a bracketed host that is no IPv6 address
        raise UnusableURL(f"url {url!r} is not a URL ({exc}); {_FORM}") from None
    if parts.scheme not in ("http", "https"):
        raise UnusableURL(f"url's scheme is {parts.scheme!r}; {_FORM}")
    if "@" in parts.netloc:
        raise UnusableURL("url carries a user or password (user@host): a delivery sends none; leave it out")
    if "#" in url:
        raise UnusableURL("url carries a #fragment: a request never sends one; leave it out")
    host = _host(parts)
    _check_ascii(url)  # after the host, so that a host in Unicode is told its IDNA form
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, _port(parts), path)


def _check_controls(url: str) -> None:
    # http.client refuses them in a request line (InvalidURL), and urlsplit silently drops some.
    for at, char in enumerate(url, start=1):
        if char <= " " or "\x7f" <= char <= "\x9f":
            what = "a space" if char == " " else f"the control character U+{ord(char):04X}"
            raise UnusableURL(f"url holds {what} at character {at}: percent-encode it ({quote(char)}) or remove it")


def _check_ascii(url: str) -> None:
    for at, char in enumerate(url, start=1):
        if not char.isascii():
            raise UnusableURL(
                f"url holds {char!r} (U+{ord(char):04X}) at character {at}, not ASCII: percent-encode it ({quote(char)})"
            )


def _host(parts: SplitResult) -> str:
    host = parts.hostname or ""
    if not host:
        raise UnusableURL(f"url has no host; {_FORM}")
    if parts.netloc.startswith("["):  # an IPv6 literal, which urlsplit has checked
        if "%" in host:
            raise UnusableURL(f"url's host [{host}] names a zone (%...): a delivery cannot use one; leave it out")
        return host
    if not host.isascii():
        raise UnusableURL(f"url's host {host!r} is not ASCII: {_idna_hint(host)}")
    _check_name(host)
    return host


def _idna_hint(host: str) -> str:
    try:
        return f"give it in its IDNA form, {host.encode('idna').decode('ascii')}"
    except UnicodeError as exc:
        return f"it has no IDNA form ({exc}); give a host name that has one"


def _check_name(host: str) -> None:
    name = host.removesuffix(".")  # a fully qualified name's final dot
    if len(name) > MAX_HOST_CHARS:
        raise UnusableURL(f"url's host is {len(name)} characters long; a host name has at most {MAX_HOST_CHARS}")
    for label in name.split("."):
        if not label:
            raise UnusableURL(f"url's host {host!r} has an empty label (a dot first, or two dots together)")
        if len(label) > MAX_LABEL_CHARS:
            raise UnusableURL(
                f"url's host has a label of {len(label)} characters ({label[:16]}...); a label has at most "
                f"{MAX_LABEL_CHARS}"
            )
        if not _LABEL.fullmatch(label):
            bad = next(c for c in label if not _LABEL.fullmatch(c))
            raise UnusableURL(
                f"url's host {host!r} holds {bad!r}: a host name is letters, digits, hyphens, underscores and dots "
                "(an IPv6 address goes in brackets: http://[2001:db8::1]/)"
            )


def _port(parts: SplitResult) -> int:
    hostport = parts.netloc
    _, bracket, after = hostport.rpartition("]")  # an IPv6 literal's colons are not the port's
    if bracket and after and not after.startswith(":"):
        raise UnusableURL(f"url's host {hostport!r} has {after!r} after its closing bracket; {_FORM}")
    _, colon, text = (after if bracket else hostport).partition(":")
    if not colon or not text:  # "host" or "host:": the scheme's port
        return 443 if parts.scheme == "https" else 80
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise UnusableURL(
            f"url's port {text!r} is no port a delivery can connect to: give 1 to 65535, or none "
            "(80 for http, 443 for https)"
        )
    return int(text)
