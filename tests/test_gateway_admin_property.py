"""The admin API against calls drawn at random, authenticated: any method, any endpoint
(and paths beside them), any query, any body (JSON of any shape, the fields each call
names with values of the wrong type, bytes that are no JSON) under any content type.
Every answer is a success or a 4xx with a problem body that says what is wrong: never a
500, whatever an operator's script or a typo sends."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.testing import ManualClock, MemoryKV

from .examples import examples
from .fakes import body_json, harness, request
from .test_gateway_admin import ROUTES as ADMIN_ROUTES
from .test_gateway_admin import TOKEN

#: The admin tests' first route (keyed on a header), a cached route (for purges) and one
#: keyed on API keys with tiers (for the API-key records).
ROUTES: list[dict[str, Any]] = [
    ADMIN_ROUTES[0],
    {
        "name": "catalog",
        "match": {"path": "/catalog/*", "methods": ["GET", "PUT"]},
        "limits": "100/minute",
        "algorithm": "token_bucket",
        "cache": {"ttl": "1m", "default_ttl": "1m"},
    },
    {
        "name": "keyed",
        "match": {"path": "/k/*"},
        "limits": "3/minute",
        "tiers": True,
        "key": "apikey",
    },
]
TIERS = {
    "by": "kv:API_KEYS",
    "default": "free",
    "anonymous": "anon",
    "plans": {"anon": "1/minute", "free": "2/minute", "pro": "4/minute"},
}
ACTIONS = (
    "/api/config",
    "/api/explain",
    "/api/keys",
    "/api/keys/reset",
    "/api/keys/refund",
    "/api/overrides",
    "/api/cache/purge",
    "/api/breakers",
    "/api/stats",
    "/api/api-keys",
    "/",
    "/api",
    "/api/",
    "/api/nothing",
)
#: Each call that changes something: its method and the fields of its JSON body.
WRITES: dict[str, tuple[str, tuple[str, ...]]] = {
    "/api/keys/reset": ("POST", ("route", "key")),
    "/api/keys/refund": ("POST", ("route", "key", "cost")),
    "/api/cache/purge": ("POST", ("url", "key")),
    "/api/breakers/": ("POST", ("state",)),
    "/api/overrides": (
        "POST",
        ("route", "key", "limits", "exempt", "reason", "expires_in", "expires_at"),
    ),
    "/api/api-keys": ("POST", ("key", "sha256", "tier", "limits", "owner")),
    "/api/overrides/": ("DELETE", ()),
    "/api/api-keys/": ("DELETE", ()),
}
#: Every name a call reads, in its query or its body.
NAMES = (
    "route",
    "key",
    "cost",
    "url",
    "method",
    "header",
    "country",
    "asn",
    "ip",
    "sha256",
    "state",
    "limits",
    "exempt",
    "reason",
    "expires_in",
    "expires_at",
    "tier",
    "owner",
)

texts = st.one_of(
    st.sampled_from(
        [
            "",
            "api",
            "catalog",
            "keyed",
            "nope",
            "ip=198.51.100.7",
            "premium_*",
            "open",
            "closed",
            "auto",
            "100/second",
            "0/minute",
            "1h",
            "-1s",
            "pro",
            "https://api.test/catalog/x",
            "http://elsewhere.test/",
            "/v1/x",
            "%zz",
            "\x00",
            "a" * 600,
            "ä\u202e",
        ]
    ),
    st.text(max_size=20),
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), texts
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(NAMES), st.text(max_size=8)), inner, max_size=4),
    ),
    max_leaves=8,
)
bodies = st.one_of(
    st.none(),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.dictionaries(st.sampled_from(NAMES), scalars, max_size=5).map(
        lambda value: json.dumps(value).encode()
    ),
    st.binary(max_size=40),
)


#: Values of the kind each field takes (drawn beside values of any kind).
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "route": st.sampled_from(["api", "catalog", "keyed", "*", "nope"]),
    "key": st.sampled_from(["ip=198.51.100.7", "header:x-api-key=k1", "k1", "premium_*", "*"]),
    "cost": st.integers(-3, 2**60),
    "url": st.sampled_from(
        [
            "https://api.test/catalog/x",
            "http://api.test/catalog/x?a=1",
            "/catalog/x",
            "https://other.test/",
            "catalog/x",
            "https://api.test/v1/x",
        ]
    ),
    "state": st.sampled_from(["open", "closed", "auto", "OPEN", "half-open"]),
    "limits": st.sampled_from(["100/second", "0/minute", "5 per 2 seconds", "1/hour", "x"]),
    "exempt": st.booleans(),
    "reason": st.text(max_size=10),
    "expires_in": st.sampled_from(["1h", "0s", "-1s", "3651d", "1e9d", "10"]),
    "expires_at": st.sampled_from(["2027-01-01T00:00:00Z", "2020-01-01", "tomorrow", "9999-12-31"]),
    "tier": st.sampled_from(["free", "pro", "anon", "gold"]),
    "owner": st.text(max_size=10),
    "sha256": st.sampled_from(["0" * 64, "zz", ""]),
}


def value_of(field: str) -> st.SearchStrategy[Any]:
    """A value for ``field``: mostly of its kind, sometimes anything."""
    return st.one_of(PLAUSIBLE.get(field, texts), PLAUSIBLE.get(field, texts), scalars)


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, str, str, list[tuple[str, str]], bytes | None]:
    headers = [("authorization", f"Bearer {TOKEN}")]
    if draw(st.booleans()):
        # Well formed in shape (the call's method, a JSON object of its own fields), so
        # the values reach the code that reads them; the values themselves are drawn.
        action = draw(st.sampled_from(sorted(WRITES)))
        method, fields = WRITES[action]
        if action.endswith("/"):
            # An origin's name (`origin` is the config's one origin), an id, a hash.
            one = st.sampled_from(["origin", "0" * 64, "1", "nope"])
            action += quote(draw(st.one_of(one, texts)), safe="")
        body = None
        if method == "POST":
            chosen = draw(st.lists(st.sampled_from(fields), unique=True))
            body = json.dumps({name: draw(value_of(name)) for name in chosen}).encode()
            headers.append(("content-type", "application/json"))
        return method, action, "", headers, body
    method = draw(st.sampled_from(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]))
    action = draw(st.sampled_from(ACTIONS))
    if draw(st.booleans()):
        # A call on one thing: an override, an origin's breaker, an API key.
        base = draw(st.sampled_from(["/api/overrides/", "/api/breakers/", "/api/api-keys/"]))
        action = base + quote(draw(texts), safe="")
    pairs = draw(st.lists(st.tuples(st.sampled_from(NAMES), texts), max_size=4))
    query = "&".join(f"{quote(name)}={quote(value, safe='')}" for name, value in pairs)
    content_type = draw(
        st.sampled_from(
            [
                None,
                "application/json",
                "application/json; charset=utf-8",
                "text/plain",
                "application/x-www-form-urlencoded",
                "application/problem+json",
            ]
        )
    )
    if content_type is not None:
        headers.append(("content-type", content_type))
    site = draw(st.sampled_from([None, "same-origin", "none", "cross-site"]))
    if site is not None:
        headers.append(("sec-fetch-site", site))
    return method, action, query, headers, draw(bodies)


@settings(max_examples=examples(600), deadline=None)
@given(st.lists(calls(), min_size=1, max_size=6))
def test_no_call_of_the_admin_api_gets_a_500_or_an_answer_that_does_not_say_why(
    drawn: list[tuple[str, str, str, list[tuple[str, str]], bytes | None]],
) -> None:
    clock = ManualClock()
    h = harness(
        *ROUTES,
        admin_token=TOKEN,
        clock=clock,
        tiers=TIERS,
        named_kv={"API_KEYS": MemoryKV(clock)},
    )
    for method, action, query, headers, body in drawn:
        answer = h.send(
            request("/_edge-limiter" + action, method, query=query, headers=headers, body=body)
        )
        said = f"{method} {action}?{query} {body!r}: {answer.status}"
        assert answer.status < 500, said
        if answer.status >= 400 and method != "HEAD":
            assert (answer.headers.get("content-type") or "").startswith(
                "application/problem+json"
            ), said
            problem = body_json(answer)
            assert problem["status"] == answer.status and problem.get("detail"), said
        clock.advance(1_000)
