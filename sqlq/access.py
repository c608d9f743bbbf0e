"""Who may reach what sqlq serves over HTTP (the dashboard, ``sqlq metrics``, a worker's
metrics): the rule for the address it binds, and the access token.

Without a token, sqlq serves the loopback addresses only (``check_bind`` refuses any
other); with one, every request must carry it: ``Authorization: Bearer <token>``, or
HTTP basic auth with the token as the password (``token_matches``).  A token is at
least 16 characters (``check_token``).  No third-party imports: a worker that serves
its metrics loads nothing of the dashboard's.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress

from .errors import InvalidConfig

#: The shortest token accepted.
MIN_TOKEN = 16


def is_loopback(host: str | None) -> bool:
    """Is ``host`` (an address or ``localhost``) this machine's loopback?"""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(
    host: str, token: str | None, how: str = "--token, or the SQLQ_WEB_TOKEN environment variable"
) -> None:
    """Refuse to serve an address other machines reach without a token (given ``how``)."""
    if token is None and not is_loopback(host):
        raise InvalidConfig(
            f"serving on {host} lets other machines in: give an access token ({how})"
        )


def check_token(token: str | None) -> None:
    """Refuse a token that guards little or nothing (an empty one matches an empty
    ``Authorization: Bearer``)."""
    if token is not None and (not isinstance(token, str) or len(token) < MIN_TOKEN):
        raise InvalidConfig(f"the access token must be a string of at least {MIN_TOKEN} characters")


def token_matches(authorization: bytes, token: str) -> bool:
    """Does an ``Authorization`` header's value (its bytes as sent) carry ``token``?"""
    kind, _, given = authorization.partition(b" ")
    if kind.lower() == b"basic":
        try:
            given = base64.b64decode(given, validate=True).partition(b":")[2]
        except binascii.Error:
            return False
    elif kind.lower() != b"bearer":
        return False
    return hmac.compare_digest(given, token.encode())
