"""Stored entries: field filtering, binary framing, and the times that govern a replay."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.caching.entry import (
    MAGIC,
    Entry,
    age_seconds,
    decode_entry,
    encode_entry,
    is_fresh,
    replay_headers,
    revalidating,
    storable_fields,
    usable_stale,
    vary_manifest,
)
from edge_limiter.core.caching.fields import connection_named
from edge_limiter.core.errors import CacheEntryError
from tests.examples import examples

NOW = 1_700_000_000_000
PROPERTY = settings(max_examples=examples(200), deadline=None)


def entry(**fields: object) -> Entry:
    base: dict[str, object] = {
        "status": 200,
        "headers": (("Content-Type", "application/json"),),
        "body": b'{"ok":true}',
        "stored_at": NOW,
        "fresh_until": NOW + 60_000,
        "stale_until": NOW + 120_000,
    }
    base.update(fields)
    return Entry(**base)  # type: ignore[arg-type]


def test_hop_by_hop_cookies_age_and_length_are_never_stored() -> None:
    headers = [
        ("Content-Type", "text/html"),
        ("Connection", "keep-alive, X-Hop"),
        ("connection", "x-other"),
        ("X-Hop", "1"),
        ("X-Other", "2"),
        ("Keep-Alive", "timeout=5"),
        ("Proxy-Authenticate", "Basic"),
        ("Proxy-Authorization", "Basic x"),
        ("TE", "trailers"),
        ("Trailer", "X-Checksum"),
        ("Transfer-Encoding", "chunked"),
        ("Upgrade", "h2c"),
        ("Set-Cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("Age", "10"),
        ("Content-Length", "4"),
        ("ETag", '"v1"'),
        ("Cache-Control", "max-age=60"),
    ]
    assert storable_fields(headers) == (
        ("Content-Type", "text/html"),
        ("ETag", '"v1"'),
        ("Cache-Control", "max-age=60"),
    )
    assert storable_fields({"X-A": "1"}) == (("X-A", "1"),)


def test_connection_names_the_fields_a_proxy_removes_but_never_framing_or_the_clients_address() -> (
    None
):
    assert connection_named(None) == frozenset()
    assert connection_named("keep-alive") == connection_named(" Close ,, upgrade") == frozenset()
    named = "X-Foo, x-api-key , Host, Content-Length, CF-Connecting-IP, CF-Ray, X-Forwarded-For"
    assert connection_named(named) == {"x-foo", "x-api-key"}
    assert connection_named('x-a, "x b", x-c') == {"x-a", "x-c"}  # not a field name: ignored


def test_round_trip_and_framing() -> None:
    made = entry(initial_age_s=5, vary=("accept",))
    data = encode_entry(made)
    assert data.startswith(MAGIC)
    assert data.endswith(made.body)
    assert decode_entry(data) == made
    manifest = vary_manifest(("accept", "accept-language"), NOW, NOW + 1, NOW + 2)
    assert decode_entry(encode_entry(manifest)) == manifest
    # A manifest's generation (an older one has none: its variants stay reachable).
    renewed = vary_manifest(("accept",), NOW, NOW + 1, NOW + 2, generation="00ab12cd34ef")
    assert decode_entry(encode_entry(renewed)).generation == "00ab12cd34ef"


def frame(header: object, body: bytes = b"", magic: bytes = MAGIC) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">4sI", magic, len(raw)) + raw + body


GOOD = {"s": 200, "h": [], "t": 1, "f": 2, "x": 3, "a": 0, "v": [], "m": False, "n": 0}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"ELC1",
        b"ELC1\x00\x00\x00\x10{}",
        frame(GOOD, magic=b"ELC2"),
        frame(b"not json"),
        frame(b"\xff\xfe"),
        frame([1, 2]),
        frame({**GOOD, "n": 1}),
        frame(GOOD, body=b"x"),
        frame({**GOOD, "s": "200"}),
        frame({**GOOD, "s": True}),
        frame({**GOOD, "t": -1}),
        frame({**GOOD, "h": [["a"]]}),
        frame({**GOOD, "h": [["a", 1]]}),
        frame({**GOOD, "h": {"a": "b"}}),
        frame({**GOOD, "v": "accept"}),
        frame({**GOOD, "m": 0}),
        frame({k: v for k, v in GOOD.items() if k != "f"}),
        struct.pack(">4sI", MAGIC, 2**31) + b"{}",
    ],
)
def test_malformed_data_is_a_specific_error(data: bytes) -> None:
    with pytest.raises(CacheEntryError):
        decode_entry(data)


def test_a_huge_header_is_refused_when_encoding() -> None:
    with pytest.raises(CacheEntryError, match="exceeds"):
        encode_entry(entry(headers=(("X-Big", "\x01" * 20_000),)))


def test_times() -> None:
    made = entry(initial_age_s=7)
    assert age_seconds(made, NOW) == 7
    assert age_seconds(made, NOW + 999) == 7
    assert age_seconds(made, NOW + 1_000) == 8
    assert age_seconds(made, NOW - 5_000) == 7  # a clock behind the store never goes negative
    assert is_fresh(made, NOW + 59_999) and not is_fresh(made, NOW + 60_000)
    assert not usable_stale(made, NOW + 59_999)
    assert usable_stale(made, NOW + 60_000) and usable_stale(made, NOW + 119_999)
    assert not usable_stale(made, NOW + 120_000)


def test_replay_adds_age_after_the_stored_fields() -> None:
    made = entry(initial_age_s=30)
    assert replay_headers(made, NOW + 12_500) == [
        ("Content-Type", "application/json"),
        ("Age", "42"),
    ]


field_text = st.text(st.characters(codec="utf-8"), max_size=8)
entries = st.builds(
    Entry,
    status=st.integers(0, 999),
    headers=st.lists(st.tuples(field_text, field_text), max_size=5).map(tuple),
    body=st.binary(max_size=64),
    stored_at=st.integers(0, 2**53),
    fresh_until=st.integers(0, 2**53),
    stale_until=st.integers(0, 2**53),
    initial_age_s=st.integers(0, 2**31),
    vary=st.lists(field_text, max_size=3).map(tuple),
    manifest=st.booleans(),
    revalidate_until=st.integers(0, 2**53),
)


@PROPERTY
@given(entries)
def test_encode_decode_round_trips(made: Entry) -> None:
    assert decode_entry(encode_entry(made)) == made


@PROPERTY
@given(entries, st.data())
def test_damaged_data_decodes_or_raises_the_specific_error(
    made: Entry, data: st.DataObject
) -> None:
    encoded = bytearray(encode_entry(made))
    index = data.draw(st.integers(0, len(encoded) - 1))
    mode = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if mode == "flip":
        encoded[index] ^= data.draw(st.integers(1, 255))
    elif mode == "truncate":
        del encoded[index:]
    else:
        encoded.extend(b"x")
    try:
        decoded = decode_entry(bytes(encoded))
    except CacheEntryError:
        return
    assert isinstance(decoded, Entry)
    # Growing or cutting the data is always caught by the body length.
    assert mode == "flip"


def test_an_entry_stored_before_stale_while_revalidate_has_no_such_window() -> None:
    made = Entry(200, (), b"x", 1_000, 2_000, 3_000, revalidate_until=9_000)
    encoded = encode_entry(made)
    size = struct.unpack_from(">4sI", encoded)[1]
    header = json.loads(encoded[8 : 8 + size])
    assert header.pop("r") == 9_000  # what an older version wrote had no "r"
    older = json.dumps(header, separators=(",", ":")).encode()
    decoded = decode_entry(struct.pack(">4sI", b"ELC1", len(older)) + older + b"x")
    assert decoded.revalidate_until == 0 and decoded.expires == 3_000
    assert not revalidating(decoded, 2_500) and revalidating(made, 2_500)
    assert not revalidating(made, 1_999) and not revalidating(made, 9_000)
