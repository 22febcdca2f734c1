"""When to read the cache, when to store a response, and for how long.

The gateway asks :func:`lookup_decision` before it reads KV (and before rate limiting: a
hit consumes no quota unless ``count_hits``), then :func:`store_decision` when the origin
has answered a request that may be stored. Both only decide; the gateway does the I/O.

This is a shared cache in front of one origin (RFC 9111) that stores whole responses only
(Range requests pass through). The route's ``ttl`` caps every lifetime: an origin can
shorten how long a response is served, never lengthen it.

KV is eventually consistent (writes reach other locations within about 60 s) and takes
one write per second per key, so a store that fails is not an error: the next miss
stores again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import NamedTuple

from ..http.dates import http_date_ms
from ..keys import CALLER_FIELDS
from .cache_control import CacheControl, delta_seconds, parse_cache_control
from .conditional import freshened_fields, needs_origin
from .entry import Entry, age_seconds, is_fresh, storable_fields, vary_manifest
from .fields import (
    Fields,
    content_length,
    field_value,
    field_values,
    is_stream,
    is_token,
    list_items,
)
from .keys import CACHEABLE_METHODS, normalize_vary
from .limits import KV_MIN_EXPIRATION_TTL_S, MAX_STORED_FIELD_BYTES
from .settings import (
    DEFAULT_TTL_STATUSES,
    MAX_STALE_IF_ERROR_MS,
    MAX_STALE_WHILE_REVALIDATE_MS,
    UNSTORABLE_STATUSES,
    CacheSettings,
)
from .targeted import targeted_directives

#: RFC 9110 section 15.1: the statuses a cache may store and reuse with heuristic
#: freshness (a lifetime of its own choosing) when the origin gives no explicit one.
HEURISTIC_STATUSES = frozenset({200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501})
#: RFC 9110 section 15: the statuses whose caching rules this cache knows (for
#: ``must-understand``, RFC 9111 section 5.2.2.3).
UNDERSTOOD_STATUSES = frozenset(
    (
        *range(200, 207),
        *range(300, 305),
        307,
        308,
        *range(400, 418),
        421,
        422,
        426,
        *range(500, 506),
    )
)
#: The heuristic lifetime is the time since Last-Modified divided by this (a tenth, as
#: RFC 9111 section 4.2.2 suggests and browsers, Squid and Varnish take) ...
HEURISTIC_DIVISOR = 10
#: ... and at most a day (Squid's default refresh_pattern keeps at most three).
HEURISTIC_MAX_MS = 86_400_000
#: The longest stale window an origin's own directive opens (a huge value would keep the
#: copy in KV for ever): the route's own bounds for its windows.
MAX_ORIGIN_STALE_MS = max(MAX_STALE_IF_ERROR_MS, MAX_STALE_WHILE_REVALIDATE_MS)


class LookupReason(StrEnum):
    """Why a request is (or is not) answered from, and stored into, the cache."""

    CACHEABLE = "cacheable"
    """Read the cache; a miss may be stored."""
    CLIENT_NO_CACHE_IGNORED = "client_no_cache_ignored"
    """The client asked to skip the cache, which the route does not allow: read as usual."""
    HEAD = "head"
    """Answered from the GET entry; a HEAD response has no body, so it is never stored."""
    CLIENT_NO_STORE = "client_no_store"
    """Read the cache, but the client asked that nothing be stored (``no-store``)."""
    CLIENT_NO_CACHE = "client_no_cache"
    """The client skipped the cache (the route allows it): a miss, rate limited like one."""
    METHOD = "method"
    """Only GET and HEAD are cached."""
    AUTHORIZATION = "authorization"
    """A request with credentials never meets a public entry."""
    COOKIE = "cookie"
    """A request with cookies never meets a public entry."""
    RANGE = "range"
    """Range requests go to the origin: entries are whole responses."""
    PRECONDITION = "precondition"
    """``If-Match`` / ``If-Unmodified-Since`` guard the origin's state: the origin judges them."""


@dataclass(frozen=True, slots=True)
class Lookup:
    """What to do with the cache for one request."""

    read: bool
    """Look the request up in KV."""
    write: bool
    """A response to it may be stored (subject to :func:`store_decision`)."""
    reason: LookupReason
    only_if_cached: bool = False
    """The client wants a stored response or nothing (RFC 9111 section 5.2.1.7): without a
    fresh copy it gets ``504``, and the origin is not asked."""
    max_age_s: int | None = None
    """The oldest copy the client takes (its ``max-age``), where the route lets clients
    decide (``allow_client_no_cache``); ``None``: any fresh copy."""
    min_fresh_s: int | None = None
    """How long a copy must stay fresh for the client (its ``min-fresh``), likewise."""
    renew: bool = False
    """The client asked the cache not to answer without asking the origin (``no-cache``,
    where the route lets clients decide): the stored copy is not served as it is, but a
    conditional request may renew it (RFC 9111 section 5.2.1.4)."""

    @property
    def bypass(self) -> bool:
        """Neither read nor written: the request goes straight on."""
        return not self.read and not self.write

    def accepts(self, entry: Entry, now: int) -> bool:
        """Whether ``entry`` is young enough for the client at ``now``. A client that says
        how old a copy it takes wants a fresh one (without ``max-stale``, which this
        cache does not read, RFC 9111 section 5.2.1.1): no stale copy, served while it is
        fetched again or when the origins fail, is one."""
        if self.max_age_s is None and self.min_fresh_s is None:
            return True
        if not is_fresh(entry, now):
            return False
        if self.max_age_s is not None and age_seconds(entry, now) > self.max_age_s:
            return False
        return self.min_fresh_s is None or entry.fresh_until - now >= self.min_fresh_s * 1000


def lookup_decision(method: str, request_headers: Fields, settings: CacheSettings) -> Lookup:
    """Whether to read the cache for a request, and whether its response may be stored."""
    method = method.upper()
    if method not in CACHEABLE_METHODS:
        return Lookup(False, False, LookupReason.METHOD)
    cache_control = field_value(request_headers, "cache-control")
    directives = parse_cache_control(cache_control)
    only = directives.only_if_cached
    if settings.scope == "public":
        # A shared entry must never carry, or be handed to, one user's credentials.
        if field_value(request_headers, "authorization") is not None:
            return Lookup(False, False, LookupReason.AUTHORIZATION, only)
        if field_value(request_headers, "cookie") is not None:
            return Lookup(False, False, LookupReason.COOKIE, only)
    if field_value(request_headers, "range") is not None:
        return Lookup(False, False, LookupReason.RANGE, only)
    if needs_origin(request_headers):
        return Lookup(False, False, LookupReason.PRECONDITION, only)
    head = method == "HEAD"
    no_store = directives.no_store
    wants_fresh = directives.no_cache or directives.max_age == 0
    if cache_control is None:
        # RFC 9111 section 5.4: Pragma counts only when Cache-Control is absent.
        pragma = field_value(request_headers, "pragma")
        wants_fresh = any(item.lower() == "no-cache" for item in list_items(pragma))
    if wants_fresh and settings.allow_client_no_cache:
        writes = not head and not no_store
        return Lookup(False, writes, LookupReason.CLIENT_NO_CACHE, only, renew=writes)
    if no_store:
        return Lookup(True, False, LookupReason.CLIENT_NO_STORE, only)
    if head:
        return Lookup(True, False, LookupReason.HEAD, only)
    if wants_fresh:
        return Lookup(True, True, LookupReason.CLIENT_NO_CACHE_IGNORED, only)
    if settings.allow_client_no_cache and (
        directives.max_age is not None or directives.min_fresh is not None
    ):
        # The client says how old a copy it takes (RFC 9111 sections 5.2.1.1 and
        # 5.2.1.3); a copy older than that is a miss, where the route lets clients skip it.
        return Lookup(
            True, True, LookupReason.CACHEABLE, only, directives.max_age, directives.min_fresh
        )
    return Lookup(True, True, LookupReason.CACHEABLE, only)


#: What the runtime gives the Worker for field bytes that are not UTF-8.
REPLACED = "\ufffd"


class StoreReason(StrEnum):
    """Why a response is (or is not) stored."""

    STORED = "stored"
    MEASURE_BODY = "measure_body"
    """Store it if the body, once read, is at most ``max_bytes``."""
    STATUS = "status"
    NO_STORE = "no_store"
    PRIVATE = "private"
    NO_CACHE = "no_cache"
    """``no-cache`` (or a bare ``Pragma: no-cache``) with no validator: every reuse would
    have to ask the origin for the whole answer again."""
    VARY_CHANGED = "vary_changed"
    """A ``304`` said the answer varies on other fields than the stored copy's."""
    NO_FRESHNESS = "no_freshness"
    """No explicit lifetime, and a status that is not heuristically cacheable."""
    SET_COOKIE = "set_cookie"
    VARY_STAR = "vary_star"
    VARY_INVALID = "vary_invalid"
    NOT_FRESH = "not_fresh"
    """The lifetime left after the copy's age is zero or less, and it has no validator."""
    FIELDS_TOO_LARGE = "fields_too_large"
    TOO_LARGE = "too_large"
    STREAM = "stream"
    """A live stream (``text/event-stream``): it may never end, and is each client's own."""
    FIELDS_NOT_TEXT = "fields_not_text"
    """A field value held bytes that are not UTF-8 (a Latin-1 filename): the runtime
    hands the Worker such bytes as U+FFFD, so a stored copy would not say what the origin
    said (passed through, the bytes stay as they were)."""


@dataclass(frozen=True, slots=True)
class Store:
    """Whether to store a response, and until when to serve it."""

    store: bool
    reason: StoreReason
    fresh_until: int = 0
    stale_until: int = 0
    initial_age_s: int = 0
    vary: tuple[str, ...] = ()
    """Request fields the response varies on: store a manifest and a variant."""
    must_measure: bool = False
    """The body's length is not known yet: store only if :func:`body_fits`."""
    revalidate_until: int = 0
    """The end of the stale-while-revalidate window (0: none)."""
    omitted: frozenset[str] = frozenset()
    """Fields (lower case) the stored copy leaves out: ``private="..."``, ``no-cache="..."``."""
    keep_until: int = 0
    """Until when a copy with a validator is kept to be revalidated (0: no validator)."""


class _Said(NamedTuple):
    """What an answer says of its own caching, once it may be stored at all."""

    directives: CacheControl
    legacy: bool  # no Cache-Control (nor a targeted field): a Pragma: no-cache counts
    targeted: CacheControl | None
    no_cache: frozenset[str] | None
    omitted: frozenset[str]
    vary: list[str]


def _said(status: int, response_headers: Fields, settings: CacheSettings) -> _Said | StoreReason:
    """What the answer says of its caching, or why it is never stored: its status, a live
    stream, no-store, private, a cookie, a ``Vary`` no request can match."""
    if status < 200 or status in UNSTORABLE_STATUSES:
        return StoreReason.STATUS
    if settings.statuses is not None and status not in settings.statuses:
        return StoreReason.STATUS
    if is_stream(response_headers):
        return StoreReason.STREAM
    # A field aimed at CDN caches (RFC 9213) replaces Cache-Control, Expires and Pragma.
    targeted = targeted_directives(response_headers)
    if targeted is not None:
        directives = targeted
        legacy = False
    else:
        cache_control = field_value(response_headers, "cache-control")
        directives = parse_cache_control(cache_control)
        legacy = cache_control is None
    if directives.has("must-understand"):
        # RFC 9111 section 5.2.2.3: stored only where the status is one this cache knows
        # the caching rules of, and then whatever no-store says (it is there for caches
        # that do not know must-understand).
        if status not in UNDERSTOOD_STATUSES:
            return StoreReason.STATUS
    elif directives.no_store:
        return StoreReason.NO_STORE
    # The qualified forms name fields a shared cache must not keep (private="a", RFC 9111
    # section 5.2.2.7) or hand out without asking the origin (no-cache="a", 5.2.2.4):
    # the rest of the answer is kept, and reused, without them.
    private = _qualified(directives, "private")
    if private is not None and not private:
        return StoreReason.PRIVATE
    no_cache = _qualified(directives, "no-cache")
    omitted = frozenset((private or frozenset()) | (no_cache or frozenset()))
    if field_values(response_headers, "set-cookie") and "set-cookie" not in omitted:
        return StoreReason.SET_COOKIE
    vary_items = list_items(field_value(response_headers, "vary"))
    if "*" in vary_items:
        return StoreReason.VARY_STAR
    if not all(is_token(item) for item in vary_items):
        return StoreReason.VARY_INVALID
    return _Said(directives, legacy, targeted, no_cache, omitted, vary_items)


def _lifetime_ms(
    status: int,
    said: _Said,
    response_headers: Fields,
    *,
    date_ms: int,
    now_ms: int,
    settings: CacheSettings,
) -> int | None:
    """How long the answer is fresh for: as it says (a targeted field's alone, when there
    is one), or the route's ``default_ttl``, or a heuristic; ``None`` for a status with
    no explicit freshness that may not be stored without it."""
    explicit_headers = response_headers if said.targeted is None else ()
    lifetime_ms = _explicit_lifetime_ms(said.directives, explicit_headers, date_ms, now_ms)
    if lifetime_ms is not None:
        return lifetime_ms
    if not (status in HEURISTIC_STATUSES or said.directives.public):
        return None
    given = settings.statuses if settings.statuses is not None else DEFAULT_TTL_STATUSES
    if settings.default_ttl_ms and status in given:
        return settings.default_ttl_ms
    return _heuristic_lifetime_ms(response_headers, date_ms, now_ms)


def store_decision(
    status: int,
    response_headers: Fields,
    body_length: int | None,
    settings: CacheSettings,
    now_ms: int,
    *,
    caller_fields: Iterable[str] = CALLER_FIELDS,
) -> Store:
    """Whether the origin's response may be stored, and its fresh and stale deadlines.

    ``body_length`` is ``None`` when the body has not been read; ``Content-Length`` then
    decides, or the answer says the body must be measured first. An entry kept per
    rate-limit key also varies on ``caller_fields`` (the gateway's ``caller_fields``).
    """
    said = _said(status, response_headers, settings)
    if isinstance(said, StoreReason):
        return Store(False, said)
    directives, legacy, _, no_cache, omitted, vary_items = said
    # no-cache (in any form; a bare Pragma: no-cache where Cache-Control is absent) lets
    # a copy be stored but never reused without asking the origin: stale from the start.
    must_ask = no_cache == frozenset() or (legacy and _pragma_no_cache(response_headers))
    date_ms = _date_ms(response_headers, now_ms)
    lifetime_ms = _lifetime_ms(
        status, said, response_headers, date_ms=date_ms, now_ms=now_ms, settings=settings
    )
    if lifetime_ms is None:
        # RFC 9111 section 3: without explicit freshness only the statuses defined as
        # heuristically cacheable may be stored (a passing 503 is no answer to keep).
        return Store(False, StoreReason.NO_FRESHNESS)
    # The copy's age when it arrives: the origin's Age, or how old its Date says it is
    # (RFC 9111 section 4.2.3), whichever is more; an Age that cannot be read, stale.
    age = _age(response_headers)
    age_s = max(age if age is not None else 0, max(0, now_ms - date_ms) // 1000)
    left_ms = min(settings.ttl_ms, lifetime_ms - age_s * 1000) if age is not None else 0
    if must_ask:
        left_ms = min(left_ms, 0)
    validated = has_validator(response_headers)
    if left_ms <= 0 and not validated:
        # Stale on arrival with nothing to revalidate it by: every reuse would be a fetch.
        return Store(False, StoreReason.NO_CACHE if must_ask else StoreReason.NOT_FRESH)
    forbidden = must_ask or directives.must_revalidate or directives.proxy_revalidate
    stale_ms = _stale_window_ms(
        settings.stale_if_error_ms, directives.stale_if_error, directives, forbidden
    )
    revalidate_ms = _stale_window_ms(
        settings.stale_while_revalidate_ms,
        directives.stale_while_revalidate,
        directives,
        forbidden,
    )
    fields = storable_fields(response_headers)
    if len(json.dumps([list(pair) for pair in fields])) > MAX_STORED_FIELD_BYTES:
        return Store(False, StoreReason.FIELDS_TOO_LARGE)
    if any(REPLACED in value for _, value in fields):
        return Store(False, StoreReason.FIELDS_NOT_TEXT)

    fresh_until = now_ms + max(0, left_ms)
    decided = Store(
        True,
        StoreReason.STORED,
        fresh_until=fresh_until,
        stale_until=fresh_until + stale_ms,
        revalidate_until=fresh_until + revalidate_ms if revalidate_ms > 0 else 0,
        keep_until=now_ms + settings.ttl_ms if validated else 0,
        omitted=omitted,
        initial_age_s=age_s,
        # An entry per rate-limit key is one client's only if the key is the client's
        # identity; clients sharing a key (one address behind a NAT, all lacking the key's
        # header) are kept apart by their credentials, as if the origin had said
        # Vary: Authorization, Cookie, and every header a route keys on (RFC 9111 3.5).
        vary=normalize_vary([*vary_items, *(caller_fields if settings.scope == "key" else ())]),
    )
    length = body_length if body_length is not None else content_length(response_headers)
    if length is None:
        return replace(decided, reason=StoreReason.MEASURE_BODY, must_measure=True)
    if not body_fits(length, settings):
        return Store(False, StoreReason.TOO_LARGE)
    return decided


def has_validator(headers: Fields) -> bool:
    """Whether a stored answer can be revalidated: it has an ``ETag`` or a valid
    ``Last-Modified`` (RFC 9111 section 4.3.1)."""
    if field_value(headers, "etag") is not None:
        return True
    values = field_values(headers, "last-modified")
    return len(values) == 1 and http_date_ms(values[0].strip(" \t"), 0) is not None


def body_fits(length: int, settings: CacheSettings) -> bool:
    """Whether a body of ``length`` bytes may be stored on this route."""
    return 0 <= length <= settings.max_bytes


def kv_expiration_ttl(expires: int, now_ms: int) -> int:
    """The ``expirationTtl`` (seconds) to store an entry that stops mattering at ``expires``.

    It covers the fresh lifetime and both stale windows (:attr:`Entry.expires`), and is
    never below KV's 60 s minimum: a shorter freshness is enforced by the entry itself.
    """
    remaining_s = -(-(expires - now_ms) // 1000)
    return max(KV_MIN_EXPIRATION_TTL_S, remaining_s)


def response_entry(
    store: Store, status: int, response_headers: Fields, body: bytes, now_ms: int
) -> Entry:
    """The entry to store for a response ``store`` allowed (fields filtered for storage)."""
    if not store.store:
        raise ValueError(f"the response is not to be stored ({store.reason})")
    return Entry(
        status=status,
        headers=tuple(
            (name, value)
            for name, value in storable_fields(response_headers)
            if name.lower() not in store.omitted
        ),
        body=body,
        stored_at=now_ms,
        fresh_until=store.fresh_until,
        stale_until=store.stale_until,
        initial_age_s=store.initial_age_s,
        vary=store.vary,
        revalidate_until=store.revalidate_until,
        keep_until=store.keep_until,
    )


def freshened_entry(
    entry: Entry,
    answer_fields: Fields,
    settings: CacheSettings,
    now_ms: int,
    *,
    caller_fields: Iterable[str] = CALLER_FIELDS,
) -> tuple[Entry, Store]:
    """A stored answer renewed by the origin's ``304`` (RFC 9111 section 4.3.4): its fields
    updated from the ``304`` (:func:`~.conditional.freshened_fields`), its freshness
    judged anew from them as of ``now_ms``. The entry is what the client gets; the
    decision says whether (and how long) it is stored again: a ``304`` may say
    ``no-store`` now, or vary otherwise, and then the renewed copy is served once and
    not kept."""
    fields = freshened_fields(entry.headers, answer_fields)
    decision = store_decision(
        entry.status, fields, len(entry.body), settings, now_ms, caller_fields=caller_fields
    )
    if decision.store and decision.vary != entry.vary:
        decision = Store(False, StoreReason.VARY_CHANGED)
    if not decision.store:
        renewed = replace(
            entry,
            headers=storable_fields(fields),
            stored_at=now_ms,
            fresh_until=now_ms,
            stale_until=now_ms,
            revalidate_until=0,
            keep_until=0,
            initial_age_s=0,
        )
        return renewed, decision
    return response_entry(decision, entry.status, fields, entry.body, now_ms), decision


def manifest_entry(store: Store, now_ms: int, generation: str = "") -> Entry:
    """The vary manifest to store at the base key with a response that varies.

    It lives as long as the variant stored with it; once it is gone, the next miss stores
    both again, under a new ``generation``.
    """
    if not store.vary:
        raise ValueError("a response without Vary needs no manifest")
    return vary_manifest(
        store.vary,
        now_ms,
        store.fresh_until,
        store.stale_until,
        store.revalidate_until,
        generation=generation,
        keep_until=store.keep_until,
    )


def _stale_window_ms(
    route_ms: int, origin_s: int | None, directives: CacheControl, forbidden: bool
) -> int:
    """How long past freshness a copy may still be used (stale-if-error or
    stale-while-revalidate): what the origin's own directive allows (RFC 5861), or the
    route's window where that is longer (an operator's deviation); none where the origin
    forbids serving it stale (``no-cache``, ``must-revalidate``, ``proxy-revalidate``),
    nor after an ``s-maxage`` without the directive (RFC 9111 section 5.2.2.10: for a
    shared cache it means proxy-revalidate)."""
    if forbidden:
        return 0
    if origin_s is None:
        return 0 if directives.s_maxage is not None else route_ms
    return max(route_ms, min(origin_s * 1000, MAX_ORIGIN_STALE_MS))


def _qualified(directives: CacheControl, name: str) -> frozenset[str] | None:
    """The field names a ``private`` or ``no-cache`` directive lists (lower case): ``None``
    when absent, empty when any of its occurrences lists none (the whole answer)."""
    found = [value for key, value in directives.directives if key == name]
    if not found:
        return None
    values = [value for value in found if value and value.strip(" \t,")]
    if len(values) != len(found):
        return frozenset()
    return frozenset(
        item.strip(" \t").lower()
        for value in values
        for item in value.split(",")
        if item.strip(" \t")
    )


def _pragma_no_cache(headers: Fields) -> bool:
    return any(item.lower() == "no-cache" for item in list_items(field_value(headers, "pragma")))


def _age(headers: Fields) -> int | None:
    """The origin's ``Age`` in seconds (0 when absent); ``None`` when it is not one valid
    delta-seconds (a list, a second line, a sign, a fraction, a parameter): how old the
    copy is cannot be known, and a shared cache takes the safe reading, stale."""
    values = field_values(headers, "age")
    if not values:
        return 0
    text = values[0].strip(" \t")
    if len(values) != 1 or not text.isascii() or not text.isdigit():
        return None
    return delta_seconds(text)


def _date_ms(headers: Fields, now_ms: int) -> int:
    """The origin's ``Date``, or ``now_ms`` when it has none that is valid (RFC 9110
    section 6.6.1: the recipient then takes the time it received the answer)."""
    values = field_values(headers, "date")
    if len(values) == 1:
        date = http_date_ms(values[0].strip(" \t"), now_ms)
        if date is not None:
            return date
    return now_ms


def _explicit_lifetime_ms(
    directives: CacheControl, headers: Fields, date_ms: int, now_ms: int
) -> int | None:
    """The origin's freshness lifetime: s-maxage, else max-age, else Expires less Date
    (``headers`` empty when a targeted field decides); ``None`` when it gives none.

    An ``Expires`` that is not one valid HTTP-date (``0``, a date in another form, two of
    them) means already expired (RFC 9111 section 5.3).
    """
    if directives.s_maxage is not None:
        return directives.s_maxage * 1000
    if directives.max_age is not None:
        return directives.max_age * 1000
    expires = field_values(headers, "expires")
    if not expires:
        return None
    expires_ms = http_date_ms(expires[0].strip(" \t"), now_ms) if len(expires) == 1 else None
    if expires_ms is None:
        return 0
    # Expires less Date is immune to skew between the origin's clock and ours.
    return expires_ms - date_ms


def _heuristic_lifetime_ms(headers: Fields, date_ms: int, now_ms: int) -> int:
    """RFC 9111 section 4.2.2: a tenth of the time since ``Last-Modified`` (as of the
    answer's ``Date``), at most :data:`HEURISTIC_MAX_MS`; 0 without a valid one."""
    values = field_values(headers, "last-modified")
    if len(values) != 1:
        return 0
    modified = http_date_ms(values[0].strip(" \t"), now_ms)
    if modified is None or modified >= date_ms:
        return 0
    return min((date_ms - modified) // HEURISTIC_DIVISOR, HEURISTIC_MAX_MS)
