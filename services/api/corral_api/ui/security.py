"""What keeps the dashboard's browser side safe: its Content-Security-Policy, the same-origin
check of state-changing requests, and the constant-time CSRF token comparison. Pure functions:
tests/unit/api/test_ui_security.py checks them without a server."""

import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

# Scripts and styles only from /ui/static (no inline code, no eval: htmx is configured with
# allowEval=false), nothing framed, forms post only here. The screen image is same-origin.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    # Pages show a tenant's data: no shared cache may keep them.
    "Cache-Control": "no-store",
}
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def same_origin(headers: Mapping[str, str], own_origin: str) -> bool:
    """True when a state-changing request comes from a page of this origin.

    Browsers send Origin with every POST (and Sec-Fetch-Site); an older one may send only a
    Referer. A request with none of them is refused: a browser that says nothing cannot be told
    apart from a forged cross-site form."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    own = own_origin.lower().rstrip("/")
    origin = headers.get("origin")
    if origin:
        return origin.lower().rstrip("/") == own
    referer = headers.get("referer")
    if referer:
        return _origin_of(referer) == own
    return False


def csrf_token_matches(expected: str, given: str | None) -> bool:
    """The per-session token, compared in constant time (an empty one never matches)."""
    return bool(expected) and bool(given) and hmac.compare_digest(expected.encode(), given.encode())
