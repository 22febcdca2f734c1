"""Request fingerprints: what must match for a retry to replay."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.caching.query import canonical_query
from edge_limiter.core.idempotency.fingerprint import fingerprint
from tests.examples import examples

BODY = hashlib.sha256(b'{"amount":100}').hexdigest()
OTHER_BODY = hashlib.sha256(b'{"amount":101}').hexdigest()


def fp(
    *,
    method: str = "POST",
    path: str = "/v1/charges",
    query: str = "",
    body: str = BODY,
    headers: dict[str, str] | None = None,
    names: tuple[str, ...] = ("content-type",),
) -> str:
    return fingerprint(method, path, query, body, headers=headers or {}, names=names)


def test_is_a_sha256_hex_digest() -> None:
    # 64 lower-case hex digits, nothing else: the form records store and compare (int(x, 16)
    # would also take upper case, spaces, underscores and a 0x prefix).
    assert re.fullmatch(r"[0-9a-f]{64}", fp()), fp()
    assert fp() == fp()  # the same request, the same fingerprint


def test_each_part_counts() -> None:
    base = fp()
    assert fp(method="PATCH") != base
    assert fp(path="/v1/charges/") != base
    assert fp(query="a=1") != base
    assert fp(body=OTHER_BODY) != base
    assert fp(headers={"content-type": "application/json"}) != base


def test_method_case_body_case_and_equivalent_escapes_do_not_count() -> None:
    assert fp(method="post") == fp()
    assert fp(body=BODY.upper()) == fp()
    assert fp(query="a=%7e") == fp(query="a=~")


def test_the_query_order_counts() -> None:
    # PHP reads a_b=1 from one and a_b=2 from the other: two requests, never one record.
    assert fp(query="a_b=2&a.b=1") != fp(query="a.b=1&a_b=2")
    assert fp(query="a[5]=x&a[]=y") != fp(query="a[]=y&a[5]=x")
    assert fp(query="b=2&a=1") != fp(query="a=1&b=2")


def test_every_caller_field_counts_and_credentials_in_one_spelling() -> None:
    names = ("authorization", "cookie", "proxy-authorization", "x-api-key")
    alice = {"cookie": "sid=alice", "x-api-key": "alice-key"}
    assert fp(names=names, headers=alice) == fp(names=names, headers=dict(alice))
    for field in names:
        other = {**alice, field: "mallory"}
        assert fp(names=names, headers=other) != fp(names=names, headers=alice), field
    bearer = {"proxy-authorization": "basic dTpw"}
    assert fp(names=names, headers=bearer) == fp(
        names=names, headers={"proxy-authorization": "Basic  dTpw"}
    )


def test_only_the_named_headers_count_in_any_case() -> None:
    json_ct = {"Content-Type": "application/json", "X-Request-Id": "1"}
    assert fp(headers=json_ct) == fp(headers={"content-type": " application/json "})
    assert fp(headers=json_ct) == fp(headers={**json_ct, "X-Request-Id": "2"})
    assert fp(names=("Content-Type", "content-type"), headers=json_ct) == fp(headers=json_ct)


def test_absent_header_differs_from_empty() -> None:
    assert fp(headers={}) != fp(headers={"content-type": ""})


def test_the_body_digest_must_be_sha256_hex() -> None:
    for bad in ("abc", BODY + "\n", BODY[:-1] + "g"):
        with pytest.raises(ValueError, match="64 hex digits"):
            fp(body=bad)


TRICKY = 'ab"[],\\ =&%'


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(TRICKY, max_size=4),
            st.text(TRICKY, max_size=4),
            st.dictionaries(st.sampled_from(["x-a", "x-b"]), st.text(TRICKY, max_size=3)),
        ),
        min_size=2,
        max_size=8,
        unique_by=lambda item: (item[0], item[1], tuple(sorted(item[2].items()))),
    )
)
def test_distinct_requests_have_distinct_fingerprints(
    requests: list[tuple[str, str, dict[str, str]]],
) -> None:
    prints = {
        fingerprint("POST", path, query, BODY, headers=headers, names=("x-a", "x-b"))
        for path, query, headers in requests
    }
    identities = {
        (path, canonical_query(query), tuple(sorted((k, v.strip()) for k, v in h.items())))
        for path, query, h in requests
    }
    assert len(prints) == len(identities)
