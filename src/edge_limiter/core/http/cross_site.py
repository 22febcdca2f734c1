"""Which requests a browser sent for another site's page, told by the fields browsers set.

A browser attaches the credentials it holds for a site (HTTP Basic, cookies) to requests
that other sites' pages make it send: a form's POST, a navigation, a ``fetch`` in
``no-cors`` mode, an image. The credentials cannot tell those from the site's own page's
requests; two fields can, since a page can neither set nor change them (forbidden
request-header names in the Fetch standard):

- ``Sec-Fetch-Site`` (Fetch Metadata): ``same-origin``, ``same-site``, ``cross-site``,
  or ``none`` for what the user asked for themselves (typed, a bookmark). Browsers send it
  to HTTPS and loopback URLs (Chromium and Edge since 2020, Firefox since 2021, Safari
  since 2023).
- ``Origin``: the page's origin, on every request but a same-origin ``GET`` or ``HEAD``
  and a ``GET`` navigation; ``null`` when the page's origin is opaque or hidden (a
  sandboxed frame, a ``data:`` page, a POST redirected across origins).

A client that is no browser sends neither, or whatever it likes, but it holds no one
else's credentials: these fields only ever refuse a request, they never admit one.
"""

from __future__ import annotations

import re

from ..canonical import canonical_host

#: The methods that read: a browser sends them cross-site for links and images.
READS = frozenset(("GET", "HEAD"))
#: ``Sec-Fetch-Site`` values of requests no other page asked for.
OWN_SITE_VALUES = frozenset(("same-origin", "none"))

_ORIGIN = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<authority>[^/?#@\s]+)")


def own_origin(scheme: str, authority: str) -> str:
    """The origin of a request's URL as the runtime received it (``https://api.example.com``:
    lower case, no default port), as a browser writes its page's ``Origin``."""
    scheme = scheme.lower()
    return f"{scheme}://{canonical_host(authority, scheme)}"


def _origin(value: str) -> str | None:
    """An ``Origin`` value in :func:`own_origin`'s form, ``None`` for anything else
    (``null``, a list, a path)."""
    match = _ORIGIN.fullmatch(value.strip().lower())
    if match is None:
        return None
    return own_origin(match["scheme"], match["authority"])


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:80] + "...")


def refusal(
    method: str,
    own: str,
    *,
    origin: str | None,
    site: str | None,
    mode: str | None,
    dest: str | None,
) -> str | None:
    """Why a request to ``own`` (see :func:`own_origin`) must be refused as another page's,
    or ``None`` when nothing says it is; ``origin`` is its ``Origin`` field, ``site``,
    ``mode`` and ``dest`` its ``Sec-Fetch-Site``, ``-Mode`` and ``-Dest``.

    Any method but ``GET`` and ``HEAD`` comes from the origin's own page, the user, or no
    browser: a ``Sec-Fetch-Site`` other than ``same-origin`` or ``none`` refuses it, and so
    does an ``Origin`` other than ``own`` (``null`` included). A read may be a top-level
    navigation from anywhere (a link to the status page); any other read a page of another
    origin asks for (a frame, a script, an image, a ``fetch``) is refused the same way."""
    if origin is not None and _origin(origin) != own:
        if origin.strip().lower() == "null":
            return "it comes from a page whose origin is hidden (Origin: null)"
        return f"it comes from a page at {_shown(origin)}, not from {own}"
    if site is None:
        return None
    sent = site.strip().lower()
    if sent in OWN_SITE_VALUES:
        return None
    if method.upper() not in READS:
        return f"the browser sent it for a page of another origin (Sec-Fetch-Site: {_shown(sent)})"
    navigation = (mode or "").strip().lower(), (dest or "").strip().lower()
    if navigation != ("navigate", "document"):
        return (
            f"a page of another origin asked for it (Sec-Fetch-Site: {_shown(sent)}, "
            f"Sec-Fetch-Mode: {_shown(navigation[0])}, Sec-Fetch-Dest: "
            f"{_shown(navigation[1])}): only a top-level navigation to it may come from elsewhere"
        )
    return None


def json_media_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` says ``application/json`` and nothing else (parameters
    such as ``charset`` aside). No form a page of another site can send says so: forms
    send ``application/x-www-form-urlencoded``, ``multipart/form-data`` or
    ``text/plain``, and a script's request with this type needs the server's consent
    first (a CORS preflight)."""
    if content_type is None:
        return False
    essence = content_type.partition(";")[0].strip().lower()
    return essence == "application/json"
