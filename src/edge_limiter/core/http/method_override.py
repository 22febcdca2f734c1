"""Method overrides: a POST that asks to be taken as another method.

Rails, Laravel, Symfony, Express's ``method-override``, ASP.NET Core and Spring let a POST
say it is really a PUT, PATCH or DELETE, in a header (``X-HTTP-Method-Override``,
``X-HTTP-Method``, ``X-Method-Override``) or a ``_method`` parameter (in the query or a
form body), and they take it only on a POST. An origin that honours one runs a method the
gateway did not match or count: a DELETE limited to 10 a minute, sent as POSTs with
``X-HTTP-Method-Override: DELETE``, would reach it unlimited. So for a POST that asks for
another method the gateway, by the config's ``method_override``:

- ``apply`` (the default): takes it as that method. It is matched, counted and forwarded
  as the method asked for, without the override fields, so the origin runs exactly what
  was counted whether or not it honours overrides;
- ``refuse``: answers ``400``: the client must send the method itself;
- ``pass``: forwards it as it came, counted as the POST it is (for an origin known to
  ignore overrides).

Several different methods asked for at once are refused in every mode but ``pass``, and
so is a GET or HEAD asked for by a POST with a body (the platform cannot send one).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import unquote_plus

from ..caching.fields import is_token, list_items
from . import bounded_json
from .bounded_json import JsonTooDeepError
from .params import (
    MAX_CANDIDATES,
    TooManyCandidatesError,
    decoded_pieces,
    same_param,
    spelling,
)

if TYPE_CHECKING:
    from .messages import HeaderMap

MODES = ("apply", "refuse", "pass")
OVERRIDE_FIELDS = ("x-http-method-override", "x-http-method", "x-method-override")
PARAM = "_method"
#: In every spelling of ``_method`` (``%5Fmethod``, PHP's ``.method``): a quick test first.
_HINT_BYTES = b"method"
FORM_TYPE = "application/x-www-form-urlencoded"
#: The largest form body read for a ``_method`` parameter; a larger one is refused (413)
#: where overrides are applied or refused, since what it asks for cannot be known.
MAX_FORM_BYTES = 1 << 20
#: Methods whose requests the platform's ``fetch`` can only send without a body.
BODILESS = frozenset(("GET", "HEAD"))
#: The methods a POST may ask to be taken as: those frameworks take in an override that
#: the platform's ``fetch`` can also send (it refuses names it does not know, which would
#: fail every attempt at the origin as if the origin were down).
OVERRIDABLE = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))


#: What :func:`asked_methods` says was asked when what a request asks cannot be read (a
#: JSON body nested too deep, too many parameters spelled like ``_method``): its value
#: says why, and the override is refused in every mode but ``pass``.
UNREADABLE = "(unreadable)"


class MethodOverrideError(ValueError):
    """A POST's override that cannot be applied (or may not be, in ``refuse`` mode)."""


def _media_types(content_type: str) -> list[str]:
    """Every media type a ``Content-Type`` may be read as. A field sent twice reaches the
    Worker joined with ", ", and origins differ on which one counts (Rack and PHP take the
    first, cut at ``;`` or ``,``): each is a candidate."""
    return [item.split(";", 1)[0].strip().lower() for item in content_type.split(",")]


def is_form(content_type: str | None) -> bool:
    """Whether a body of this ``Content-Type`` may be read as a URL-encoded form (whose
    ``_method`` counts): a form (as any of the types of a field sent twice), or a body of
    no type at all (Rack, hence Rails, parses a POST body without one as a form)."""
    if not content_type or not content_type.strip():
        return True
    return FORM_TYPE in _media_types(content_type)


def is_json(content_type: str | None) -> bool:
    """Whether a body of this ``Content-Type`` may be JSON (Laravel takes a ``_method``
    member of a JSON body as the method too). Laravel's test is loose: a field holding
    ``/json`` or ``+json`` anywhere (``text/json``, ``application/json-seq``, even in a
    parameter), so that is the test here, in any case."""
    if not content_type:
        return False
    lowered = content_type.lower()
    return "/json" in lowered or "+json" in lowered


def _params(text: str, where: str, asked: dict[str, str]) -> list[tuple[str, str]]:
    """The ``_method`` parameters of a query or form as origins read them: names and
    values decoded (Rack, PHP and Express's ``qs`` decode ``%5Fmethod`` to ``_method``),
    ``;`` separating them as ``&`` does (Rack 2). Only pieces spelled like ``_method``
    are decoded (a form of a million other parameters is not parsed whole); too many of
    them make the request unreadable (noted in ``asked`` as coming from ``where``)."""
    try:
        return decoded_pieces(text, PARAM, "&;")
    except TooManyCandidatesError:
        asked[UNREADABLE] = (
            f"{where} has more than {MAX_CANDIDATES} parameters spelled like _method"
        )
        return []


def without_override_param(query: str) -> str:
    """``query`` without its ``_method`` parameters (in any spelling origins decode to
    it), the others kept as written, separators included: once applied, the override is
    the request's method, and the URI is the one the method acts on (a cache invalidated
    by the DELETE is the bare URI's)."""
    spelled = spelling(PARAM)
    if spelled.search(query) is None:
        return query
    pieces = re.split(r"([&;])", query)
    kept: list[str] = []
    for index in range(0, len(pieces), 2):
        piece = pieces[index]
        name = piece.partition("=")[0]
        if spelled.search(name) is not None and same_param(unquote_plus(name), PARAM):
            continue
        if kept:
            kept.append(pieces[index - 1])
        kept.append(piece)
    return "".join(kept)


def _json_method(body: bytes) -> str | None:
    """A JSON object body's ``_method`` member, if it is a string; :data:`UNREADABLE` for
    a body nested too deep to parse safely (see :mod:`.bounded_json`)."""
    if b"\\u" not in body and PARAM.encode() not in body.lower():
        return None
    try:
        data = bounded_json.loads(body)
    except JsonTooDeepError:
        return UNREADABLE
    except ValueError:
        return None
    value = data.get(PARAM) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def override_fields(headers: HeaderMap) -> list[tuple[str, str]]:
    """The override fields' (name, value) pairs of a request, as :func:`asked_methods`
    takes them."""
    return [(name, value) for name in OVERRIDE_FIELDS for value in headers.get_all(name)]


def asked_methods(
    fields: list[tuple[str, str]],
    query: str,
    form: bytes | None,
    json_body: bytes | None = None,
) -> dict[str, str]:
    """Every method a request asks to be taken as, upper-cased, each with where it was
    asked (for the message): ``fields`` are the override fields' (name, value) pairs as
    received (a value the runtime joined from several lines holds commas), ``query`` the
    raw query, ``form`` the body when it is read as a URL-encoded form, ``json_body`` the
    body when it is JSON."""
    asked: dict[str, str] = {}
    for name, value in fields:
        for method in list_items(value):
            asked.setdefault(method.upper(), f"the {name} field")
    if query:  # the name may be written encoded, or as PHP reads it
        for _, value in _params(query, "query", asked):
            if value.strip():
                asked.setdefault(value.strip().upper(), "the _method query parameter")
    if form and (b"%" in form or _HINT_BYTES in form.lower()):
        for _, value in _params(form.decode("utf-8", errors="replace"), "form", asked):
            if value.strip():
                asked.setdefault(value.strip().upper(), "the _method form field")
    if json_body:
        member = _json_method(json_body)
        if member == UNREADABLE:
            asked[UNREADABLE] = f"JSON body is nested deeper than {bounded_json.MAX_DEPTH} levels"
        elif member is not None and member.strip():
            asked.setdefault(member.strip().upper(), "the _method member of the JSON body")
    return asked


def overridden_method(mode: str, asked: dict[str, str], has_body: bool) -> str | None:
    """The method a POST that asks for ``asked`` is taken as (``None``: as the POST it is).

    Raises :class:`MethodOverrideError`, saying why, when the override is refused.
    """
    if mode == "pass" or not asked:
        return None
    if UNREADABLE in asked:
        raise MethodOverrideError(
            f"The request is a POST whose {asked[UNREADABLE]}: whether it asks to be "
            "taken as another method (_method) cannot be read. Send the method itself, "
            "or a simpler request."
        )
    if len(asked) > 1:
        named = ", ".join(f"{method} ({where})" for method, where in sorted(asked.items()))
        raise MethodOverrideError(
            f"The request is a POST that asks to be taken as several methods: {named}. "
            "Send one, or better, the method itself."
        )
    ((wanted, where),) = asked.items()
    if wanted == "POST":
        return None
    if mode == "refuse":
        raise MethodOverrideError(
            f"The request is a POST that asks, in {where}, to be taken as {wanted}: this "
            "gateway counts the method it receives and takes no method overrides "
            f"(method_override = 'refuse'). Send a {wanted} request."
        )
    if not is_token(wanted):
        raise MethodOverrideError(
            f"The request is a POST that asks, in {where}, to be taken as {wanted!r}, "
            "which is not a method."
        )
    if wanted not in OVERRIDABLE:
        raise MethodOverrideError(
            f"The request is a POST that asks, in {where}, to be taken as {wanted}: an "
            f"override may ask for {', '.join(sorted(OVERRIDABLE - {'POST'}))}. Send a "
            f"{wanted} request itself."
        )
    if wanted in BODILESS and has_body:
        raise MethodOverrideError(
            f"The request is a POST with a body that asks, in {where}, to be taken as "
            f"{wanted}: the platform sends a {wanted} without a body. Send a {wanted} "
            "request without one."
        )
    return wanted
