"""Cache decisions: when to read, when to store, and lifetimes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.caching.entry import decode_entry, encode_entry
from edge_limiter.core.caching.policy import (
    Lookup,
    LookupReason,
    Store,
    StoreReason,
    body_fits,
    freshened_entry,
    kv_expiration_ttl,
    lookup_decision,
    manifest_entry,
    response_entry,
    store_decision,
)
from edge_limiter.core.caching.settings import CacheSettings
from tests.examples import examples

NOW = 1_700_000_000_000
# Most settings here give answers without freshness the route's lifetime (default_ttl, an
# operator's opt-in); RFC is the cache as RFC 9111 has it, with no such lifetime.
RFC = CacheSettings(ttl_ms=86_400_000)
PUBLIC = CacheSettings(ttl_ms=300_000, default_ttl_ms=300_000)
KEYED = CacheSettings(ttl_ms=300_000, default_ttl_ms=300_000, scope="key")
ALLOWING = CacheSettings(ttl_ms=300_000, default_ttl_ms=300_000, allow_client_no_cache=True)
STALE = CacheSettings(ttl_ms=300_000, default_ttl_ms=300_000, stale_if_error_ms=600_000)
UPDATING = CacheSettings(ttl_ms=300_000, default_ttl_ms=300_000, stale_while_revalidate_ms=30_000)


# --- lookup ------------------------------------------------------------------------------


def test_plain_get_reads_and_may_store() -> None:
    assert lookup_decision("GET", {}, PUBLIC) == Lookup(True, True, LookupReason.CACHEABLE)
    assert lookup_decision("get", {"accept": "*/*"}, PUBLIC).reason == LookupReason.CACHEABLE


def test_head_reads_the_get_entry_but_never_stores() -> None:
    assert lookup_decision("HEAD", {}, PUBLIC) == Lookup(True, False, LookupReason.HEAD)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "QUERY"])
def test_other_methods_bypass(method: str) -> None:
    lookup = lookup_decision(method, {}, PUBLIC)
    assert lookup.bypass and lookup.reason == LookupReason.METHOD


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"Authorization": "Bearer x"}, LookupReason.AUTHORIZATION),
        ({"authorization": ""}, LookupReason.AUTHORIZATION),
        ({"Cookie": "session=1"}, LookupReason.COOKIE),
        ([("cookie", "a=1"), ("cookie", "b=2")], LookupReason.COOKIE),
    ],
)
def test_credentials_never_meet_a_public_entry(headers: object, reason: LookupReason) -> None:
    lookup = lookup_decision("GET", headers, PUBLIC)  # type: ignore[arg-type]
    assert lookup.bypass and lookup.reason == reason
    assert lookup_decision("HEAD", headers, PUBLIC).bypass  # type: ignore[arg-type]


def test_credentials_are_fine_with_a_keyed_entry() -> None:
    headers = {"authorization": "Bearer x", "cookie": "a=1"}
    assert lookup_decision("GET", headers, KEYED) == Lookup(True, True, LookupReason.CACHEABLE)


def test_range_requests_pass_through() -> None:
    lookup = lookup_decision("GET", {"range": "bytes=0-99"}, PUBLIC)
    assert lookup.bypass and lookup.reason == LookupReason.RANGE


@pytest.mark.parametrize(
    "headers",
    [
        {"cache-control": "no-cache"},
        {"Cache-Control": "max-age=0"},
        {"cache-control": "NO-CACHE, max-stale"},
        {"pragma": "no-cache"},
    ],
)
def test_client_no_cache_is_ignored_unless_allowed(headers: dict[str, str]) -> None:
    assert lookup_decision("GET", headers, PUBLIC) == Lookup(
        True, True, LookupReason.CLIENT_NO_CACHE_IGNORED
    )
    # Not served from the cache, but a stored copy may be renewed by asking the origin.
    assert lookup_decision("GET", headers, ALLOWING) == Lookup(
        False, True, LookupReason.CLIENT_NO_CACHE, renew=True
    )
    assert lookup_decision("HEAD", headers, ALLOWING) == Lookup(
        False, False, LookupReason.CLIENT_NO_CACHE
    )


def test_a_live_stream_is_never_stored() -> None:
    fields = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "max-age=60"}
    decision = store_decision(200, fields, None, PUBLIC, 0)
    assert not decision.store and decision.reason == StoreReason.STREAM


def test_only_if_cached_is_carried_whatever_the_lookup() -> None:
    only = {"cache-control": "max-age=10, ONLY-IF-CACHED"}
    assert lookup_decision("GET", only, PUBLIC) == Lookup(True, True, LookupReason.CACHEABLE, True)
    refused = lookup_decision("GET", {**only, "range": "bytes=0-1"}, PUBLIC)
    assert refused.bypass and refused.only_if_cached
    assert not lookup_decision("GET", {}, PUBLIC).only_if_cached


def test_pragma_counts_only_without_cache_control() -> None:
    headers = {"pragma": "no-cache", "cache-control": "max-age=60"}
    assert lookup_decision("GET", headers, ALLOWING).reason == LookupReason.CACHEABLE


def test_a_client_max_age_above_zero_is_not_a_bypass() -> None:
    lookup = lookup_decision("GET", {"cache-control": "max-age=10"}, ALLOWING)
    assert lookup.reason == LookupReason.CACHEABLE


def test_client_no_store_reads_but_stores_nothing() -> None:
    headers = {"cache-control": "no-store"}
    assert lookup_decision("GET", headers, PUBLIC) == Lookup(
        True, False, LookupReason.CLIENT_NO_STORE
    )
    both = {"cache-control": "no-store, no-cache"}
    assert lookup_decision("GET", both, ALLOWING) == Lookup(
        False, False, LookupReason.CLIENT_NO_CACHE
    )


# --- store -------------------------------------------------------------------------------


def decide(
    headers: list[tuple[str, str]] | dict[str, str],
    status: int = 200,
    length: int | None = 10,
    cache: CacheSettings = PUBLIC,
) -> Store:
    return store_decision(status, headers, length, cache, NOW)


def test_plain_200_is_stored_for_the_route_ttl() -> None:
    store = decide({"content-type": "text/plain"})
    assert store == Store(True, StoreReason.STORED, NOW + 300_000, NOW + 300_000)


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"cache-control": "no-store"}, StoreReason.NO_STORE),
        ({"cache-control": "public, max-age=60, no-store"}, StoreReason.NO_STORE),
        ({"cache-control": "private"}, StoreReason.PRIVATE),
        ({"cache-control": "no-cache"}, StoreReason.NO_CACHE),
        ({"pragma": "no-cache"}, StoreReason.NO_CACHE),
        ({"set-cookie": "a=1"}, StoreReason.SET_COOKIE),
        ({"Set-Cookie": ""}, StoreReason.SET_COOKIE),
        ({"vary": "*"}, StoreReason.VARY_STAR),
        ({"vary": "accept, *"}, StoreReason.VARY_STAR),
        ({"vary": "accept, bad header"}, StoreReason.VARY_INVALID),
        ({"vary": "accept\n"}, StoreReason.VARY_INVALID),
        ({"cache-control": "max-age=0"}, StoreReason.NOT_FRESH),
        ({"cache-control": "max-age=bogus"}, StoreReason.NOT_FRESH),
        ({"cache-control": "max-age=60", "age": "60"}, StoreReason.NOT_FRESH),
        ({"cache-control": "s-maxage=0, max-age=60"}, StoreReason.NOT_FRESH),
        ({"expires": "0"}, StoreReason.NOT_FRESH),
        ({"expires": "Thu, 01 Jan 1970 00:00:00 GMT"}, StoreReason.NOT_FRESH),
        ({"content-length": "2000000"}, StoreReason.TOO_LARGE),
        ({"x-big": "x" * 30_000}, StoreReason.FIELDS_TOO_LARGE),
        # A Latin-1 byte, as the runtime hands it over (a probe's finding: a hit said
        # U+FFFD where the origin sent the byte E9).
        (
            {"content-disposition": 'attachment; filename="r\ufffdsum\ufffd.pdf"'},
            StoreReason.FIELDS_NOT_TEXT,
        ),
    ],
)
def test_not_stored(headers: dict[str, str], reason: StoreReason) -> None:
    store = decide(headers, length=None)
    assert not store.store
    assert store.reason == reason


def test_pragma_is_ignored_when_cache_control_is_present() -> None:
    assert decide({"pragma": "no-cache", "cache-control": "max-age=60"}).store


@pytest.mark.parametrize("status", [201, 202, 206, 302, 304, 400, 404, 500, 503])
def test_statuses_outside_the_route_list_are_not_stored(status: int) -> None:
    listed = CacheSettings(ttl_ms=300_000, statuses=(200, 203, 204, 300, 301, 308))
    store = decide({"cache-control": "max-age=60"}, status=status, cache=listed)
    assert not store.store and store.reason == StoreReason.STATUS


@pytest.mark.parametrize("status", [201, 202, 302, 400, 404, 500, 503, 599])
def test_without_a_list_any_status_the_origin_gives_a_lifetime_is_stored(status: int) -> None:
    assert decide({"cache-control": "max-age=60"}, status=status, cache=RFC).store
    # default_ttl only for the successes; a 404 the origin says nothing of is not kept.
    assert not decide({}, status=status).store


@pytest.mark.parametrize("status", [101, 206, 304])
def test_a_partial_conditional_or_interim_answer_is_never_stored(status: int) -> None:
    store = decide({"cache-control": "max-age=60"}, status=status, cache=RFC)
    assert not store.store and store.reason == StoreReason.STATUS


def test_error_statuses_are_stored_when_listed() -> None:
    cache = CacheSettings(ttl_ms=60_000, default_ttl_ms=60_000, statuses=(200, 404))
    assert decide({}, status=404, cache=cache).store


def test_origin_max_age_shortens_the_ttl_but_never_lengthens_it() -> None:
    assert decide({"cache-control": "max-age=60"}).fresh_until == NOW + 60_000
    assert decide({"cache-control": "max-age=86400"}).fresh_until == NOW + 300_000


def test_s_maxage_wins_over_max_age() -> None:
    store = decide({"cache-control": "max-age=10, s-maxage=100"})
    assert store.fresh_until == NOW + 100_000
    store = decide({"cache-control": "max-age=100, s-maxage=10"})
    assert store.fresh_until == NOW + 10_000


def test_the_origin_age_is_subtracted_and_carried() -> None:
    store = decide({"cache-control": "max-age=100", "age": "30"})
    assert store.fresh_until == NOW + 70_000
    assert store.initial_age_s == 30


@pytest.mark.parametrize("age", ["soon", "-10", "10.0", "10, 50", "0, 0", "10;x=1", " "])
def test_an_age_that_cannot_be_read_makes_the_copy_stale(age: str) -> None:
    assert decide({"cache-control": "max-age=100", "age": age}).reason == StoreReason.NOT_FRESH
    stale = decide({"cache-control": "max-age=100", "age": age, "etag": '"a"'})
    assert stale.store and stale.fresh_until == NOW  # kept, to be revalidated
    assert decide({"cache-control": "max-age=100", "age": " 10 "}).fresh_until == NOW + 90_000


def test_expires_is_honoured_without_max_age() -> None:
    # NOW is 2023-11-14T22:13:20Z; the origin's clock is 10 s behind ours.
    headers = {"date": "Tue, 14 Nov 2023 22:13:10 GMT", "expires": "Tue, 14 Nov 2023 22:14:10 GMT"}
    # Expires less Date (60 s), less the age the Date says the copy has (10 s).
    assert decide(headers, cache=RFC).fresh_until == NOW + 50_000
    headers["cache-control"] = "max-age=120"
    assert decide(headers, cache=RFC).fresh_until == NOW + 110_000


@pytest.mark.parametrize(
    "expires",
    [
        "Thu, 01 Jan 2050 00:00:00 UTC",  # not GMT
        "Thu, 01 Jan 2050 00:00:00 AEST",
        "Thu, 01 Jan 50 00:00:00 GMT",  # a two-digit year in the IMF form
        "Thu 01 Jan 2050 00:00:00 GMT",  # no comma
        "Thu,  01 Jan 2050 00:00:00 GMT",  # two spaces
        "Thu, 01-Jan-2050 00:00:00 GMT",  # dashes in the IMF form
        "Thu, 01 Jan 2050 00.00.00 GMT",  # periods
        "Thu, 01 Jan 2050 0:00:00 GMT",  # a one-digit hour
        "Thu, 01 Jan 2050 00:00:00 GMT, Fri, 02 Jan 2050 00:00:00 GMT",  # two lines
        "0",
        "",
    ],
)
def test_an_invalid_or_repeated_expires_means_already_expired(expires: str) -> None:
    store = decide({"expires": expires}, cache=RFC)
    assert not store.store and store.reason == StoreReason.NOT_FRESH
    # ... and stale at once where a validator lets it be revalidated.
    kept = decide({"expires": expires, "etag": '"v1"'}, cache=RFC)
    assert kept.store and kept.fresh_until == NOW and kept.keep_until == NOW + RFC.ttl_ms


def test_the_obsolete_date_forms_a_recipient_must_accept() -> None:
    for expires in ("Tuesday, 14-Nov-23 22:14:20 GMT", "Tue Nov 14 22:14:20 2023"):
        assert decide({"expires": expires}, cache=RFC).fresh_until == NOW + 60_000


def test_without_explicit_freshness_only_heuristic_statuses_are_kept_heuristically() -> None:
    # NOW is 2023-11-14T22:13:20Z: modified 10 days before the Date.
    fields = {
        "last-modified": "Sat, 04 Nov 2023 22:13:20 GMT",
        "date": "Tue, 14 Nov 2023 22:13:20 GMT",
    }
    every = CacheSettings(ttl_ms=365 * 86_400_000, statuses=tuple(range(200, 600)))
    for status in (200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501):
        store = decide(fields, status=status, cache=every)
        # A tenth of the ten days, at most a day.
        assert store.store and store.fresh_until == NOW + 86_400_000, status
    for status in (201, 202, 403, 502, 503, 504, 599):
        store = decide(fields, status=status, cache=every)
        assert not store.store and store.reason == StoreReason.NO_FRESHNESS, status
    # Marked public, any status may be (RFC 9111 section 4.2.2).
    assert decide({**fields, "cache-control": "public"}, status=599, cache=every).store
    # Modified an hour before: a tenth of it.
    recent = {**fields, "last-modified": "Tue, 14 Nov 2023 21:13:20 GMT"}
    assert decide(recent, cache=every).fresh_until == NOW + 360_000
    # The route's ttl caps the heuristic too.
    assert decide(fields, cache=CacheSettings(ttl_ms=60_000)).fresh_until == NOW + 60_000


def test_an_answer_with_no_freshness_and_no_validator_is_not_stored() -> None:
    assert decide({}, cache=RFC).reason == StoreReason.NOT_FRESH
    # With the operator's default_ttl it lives that long (heuristic statuses only).
    given = CacheSettings(ttl_ms=600_000, default_ttl_ms=120_000, statuses=(200, 503))
    assert decide({}, cache=given).fresh_until == NOW + 120_000
    assert decide({}, status=503, cache=given).reason == StoreReason.NO_FRESHNESS
    assert decide({"cache-control": "max-age=500"}, cache=given).fresh_until == NOW + 500_000


def test_expires_without_date_counts_from_now() -> None:
    # NOW is 2023-11-14T22:13:20Z.
    store = decide({"expires": "Tue, 14 Nov 2023 22:14:20 GMT"})
    assert store.fresh_until == NOW + 60_000


def test_stale_if_error_window() -> None:
    store = decide({}, cache=STALE)
    assert (store.fresh_until, store.stale_until) == (NOW + 300_000, NOW + 900_000)
    # The origin's own window, and the route's where that is longer (an opt-in).
    assert decide({"cache-control": "max-age=60, stale-if-error=30"}, cache=RFC).stale_until == (
        NOW + 90_000
    )
    longer = decide({"cache-control": "max-age=60, stale-if-error=30"}, cache=STALE)
    assert longer.stale_until == NOW + 660_000
    assert decide({"cache-control": "max-age=60"}, cache=RFC).stale_until == NOW + 60_000
    for forbids in ("max-age=60, must-revalidate", "max-age=60, proxy-revalidate", "s-maxage=60"):
        store = decide({"cache-control": forbids}, cache=STALE)
        assert store.stale_until == store.fresh_until == NOW + 60_000
    # s-maxage forbids a stale copy unless the origin allows one in so many words.
    allowed = decide({"cache-control": "s-maxage=60, stale-if-error=100"}, cache=RFC)
    assert allowed.stale_until == NOW + 160_000


def test_stale_while_revalidate_window() -> None:
    store = decide({}, cache=UPDATING)
    assert (store.fresh_until, store.revalidate_until) == (NOW + 300_000, NOW + 330_000)
    assert decide({}).revalidate_until == 0  # the route's window is 0 by default
    origin = decide({"cache-control": "max-age=60, stale-while-revalidate=10"}, cache=RFC)
    assert origin.revalidate_until == NOW + 70_000
    longer = decide({"cache-control": "max-age=60, stale-while-revalidate=10"}, cache=UPDATING)
    assert longer.revalidate_until == NOW + 90_000  # the route's window, longer
    wider = decide({"cache-control": "max-age=60, stale-while-revalidate=999"}, cache=UPDATING)
    assert wider.revalidate_until == NOW + 1_059_000  # the origin's, longer
    for forbids in ("max-age=60, must-revalidate", "max-age=60, proxy-revalidate", "s-maxage=60"):
        assert decide({"cache-control": forbids}, cache=UPDATING).revalidate_until == 0
    assert (
        decide({"cache-control": "max-age=9, stale-while-revalidate=0"}, cache=RFC).revalidate_until
        == 0
    )


def test_vary_names_are_normalised() -> None:
    store = decide({"vary": "Accept-Language, x-tenant,ACCEPT-LANGUAGE"})
    assert store.store and store.vary == ("accept-language", "x-tenant")
    # Accept-Encoding alone: one entry for every client (see keys.VARY_IGNORED).
    assert decide({"vary": "Accept-Encoding"}).vary == ()


def test_body_length_decides_then_content_length_then_measuring() -> None:
    small = CacheSettings(ttl_ms=60_000, default_ttl_ms=60_000, max_bytes=100)
    assert decide({}, length=100, cache=small).store
    assert decide({}, length=101, cache=small).reason == StoreReason.TOO_LARGE
    assert decide({"content-length": "100"}, length=None, cache=small).store
    assert decide({"content-length": "101"}, length=None, cache=small).reason == (
        StoreReason.TOO_LARGE
    )
    for unknown in ({}, {"content-length": "ten"}, {"content-length": "1, 2"}):
        store = decide(unknown, length=None, cache=small)
        assert store.store and store.must_measure and store.reason == StoreReason.MEASURE_BODY
    assert decide({"content-length": "5, 5"}, length=None, cache=small).reason == (
        StoreReason.STORED
    )
    # A known body length wins over a Content-Length that disagrees.
    assert decide({"content-length": "5000"}, length=10, cache=small).store
    assert body_fits(100, small) and not body_fits(101, small)


def test_kv_expiration_covers_fresh_and_stale_and_is_at_least_a_minute() -> None:
    assert kv_expiration_ttl(NOW + 1_000, NOW) == 60
    assert kv_expiration_ttl(NOW + 60_001, NOW) == 61
    assert kv_expiration_ttl(NOW + 900_000, NOW) == 900
    assert kv_expiration_ttl(NOW - 5_000, NOW) == 60


def test_entries_built_from_a_decision() -> None:
    headers = [
        ("Content-Type", "text/plain"),
        ("Vary", "Accept"),
        ("Age", "3"),
        ("Connection", "close, x-trace"),
        ("X-Trace", "abc"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Length", "5"),
    ]
    store = decide(headers, length=5, cache=STALE)
    entry = response_entry(store, 200, headers, b"hello", NOW)
    assert entry.headers == (("Content-Type", "text/plain"), ("Vary", "Accept"))
    # Without an origin lifetime the route's default_ttl runs from now, less the Age it
    # came with; the Age is carried into every replay.
    assert (entry.stored_at, entry.fresh_until, entry.stale_until) == (
        NOW,
        NOW + 297_000,
        NOW + 897_000,
    )
    assert entry.initial_age_s == 3 and entry.vary == ("accept",)
    manifest = manifest_entry(store, NOW)
    assert manifest.manifest and manifest.vary == ("accept",) and manifest.body == b""
    assert decode_entry(encode_entry(entry)) == entry
    assert decode_entry(encode_entry(manifest)) == manifest
    with pytest.raises(ValueError, match="not to be stored"):
        response_entry(decide({"cache-control": "no-store"}), 200, {}, b"", NOW)
    with pytest.raises(ValueError, match="no manifest"):
        manifest_entry(decide({}), NOW)


@settings(max_examples=examples(200), deadline=None)
@given(
    max_age=st.one_of(st.none(), st.integers(0, 10**7)),
    s_maxage=st.one_of(st.none(), st.integers(0, 10**7)),
    age=st.one_of(st.none(), st.integers(0, 10**7)),
    ttl_s=st.integers(1, 10**5),
    stale_s=st.integers(0, 10**5),
)
def test_lifetime_is_never_longer_than_the_ttl_or_the_origin_allows(
    max_age: int | None, s_maxage: int | None, age: int | None, ttl_s: int, stale_s: int
) -> None:
    directives = []
    if max_age is not None:
        directives.append(f"max-age={max_age}")
    if s_maxage is not None:
        directives.append(f"s-maxage={s_maxage}")
    headers = {"cache-control": ", ".join(directives)} if directives else {}
    if age is not None:
        headers["age"] = str(age)
    cache = CacheSettings(
        ttl_ms=ttl_s * 1000, default_ttl_ms=ttl_s * 1000, stale_if_error_ms=stale_s * 1000
    )
    store = decide(headers, cache=cache)
    origin = s_maxage if s_maxage is not None else max_age
    remaining = (ttl_s if origin is None else origin) - (age or 0)
    if remaining <= 0:
        assert not store.store and store.reason == StoreReason.NOT_FRESH
        return
    assert store.store
    lifetime = store.fresh_until - NOW
    assert 0 < lifetime <= ttl_s * 1000
    assert lifetime == min(ttl_s, remaining) * 1000
    assert store.fresh_until <= store.stale_until <= store.fresh_until + stale_s * 1000
    assert kv_expiration_ttl(store.stale_until, NOW) * 1000 >= store.stale_until - NOW


def test_a_client_max_age_and_min_fresh_count_only_where_clients_may_skip_the_cache() -> None:
    asked = {"cache-control": "max-age=30, min-fresh=10"}
    allowing = lookup_decision("GET", asked, ALLOWING)
    assert (allowing.max_age_s, allowing.min_fresh_s, allowing.read) == (30, 10, True)
    assert lookup_decision("GET", asked, PUBLIC).max_age_s is None
    store = decide({"cache-control": "max-age=60"})
    entry = response_entry(store, 200, [], b"x", NOW)
    assert allowing.accepts(entry, NOW + 30_000)
    assert not allowing.accepts(entry, NOW + 31_000)  # older than 30 s
    assert not Lookup(True, True, LookupReason.CACHEABLE, min_fresh_s=10).accepts(
        entry, NOW + 51_000
    )
    assert Lookup(True, True, LookupReason.CACHEABLE).accepts(entry, NOW + 59_000)


def test_a_304_renews_a_stale_copy_judged_anew_from_its_fields() -> None:
    first = decide({"cache-control": "max-age=60", "etag": '"a"', "x-test": "A"}, cache=RFC)
    entry = response_entry(
        first,
        200,
        [("Cache-Control", "max-age=60"), ("ETag", '"a"'), ("X-Test", "A")],
        b"body",
        NOW,
    )
    later = NOW + 120_000
    renewed, decision = freshened_entry(
        entry, [("Cache-Control", "max-age=3600"), ("X-Test", "B")], RFC, later
    )
    assert decision.store and renewed.fresh_until == later + 3_600_000
    assert renewed.body == b"body" and renewed.stored_at == later
    assert dict(renewed.headers) == {"Cache-Control": "max-age=3600", "ETag": '"a"', "X-Test": "B"}
    # A 304 that now says no-store: served renewed this once, not kept.
    once, refused = freshened_entry(entry, [("Cache-Control", "no-store")], RFC, later)
    assert not refused.store and once.body == b"body" and once.fresh_until == later
    # ... or that varies on other fields than the copy's.
    _, varied = freshened_entry(entry, [("Vary", "Accept")], RFC, later)
    assert not varied.store and varied.reason == StoreReason.VARY_CHANGED


def test_must_understand_stores_known_statuses_only_and_overrides_no_store() -> None:
    fields = {"cache-control": "max-age=60, no-store, must-understand"}
    assert decide(fields, cache=RFC).store
    assert decide(fields, status=404, cache=RFC).store
    unknown = decide(fields, status=599, cache=RFC)
    assert not unknown.store and unknown.reason == StoreReason.STATUS
    assert decide({"cache-control": "max-age=60, no-store"}, cache=RFC).reason == (
        StoreReason.NO_STORE
    )


def test_the_fields_a_qualified_private_or_no_cache_names_are_left_out() -> None:
    fields = [
        ("cache-control", 'max-age=60, private="X-User", no-cache="a, b"'),
        ("x-user", "alice"),
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("set-cookie", "s=1"),
    ]
    # A cookie answer is one client's, unless it is left out of the stored copy.
    assert decide(fields, cache=RFC).reason == StoreReason.SET_COOKIE
    fields[0] = ("cache-control", 'max-age=60, private="X-User, Set-Cookie", no-cache="a, b"')
    store = decide(fields, cache=RFC)
    assert store.store and store.fresh_until == NOW + 60_000  # reused without asking
    entry = response_entry(store, 200, fields, b"x", NOW)
    assert [name for name, _ in entry.headers] == ["cache-control", "c"]
    # Unqualified, or with an empty list: the whole answer.
    assert decide({"cache-control": 'max-age=60, private=""'}, cache=RFC).reason == (
        StoreReason.PRIVATE
    )
    assert decide({"cache-control": "max-age=60, no-cache"}, cache=RFC).reason == (
        StoreReason.NO_CACHE
    )
