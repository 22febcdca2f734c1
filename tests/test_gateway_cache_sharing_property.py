"""Who may read a stored answer, through the whole gateway: callers drawn at random (an
address, an API key, `Authorization`, a cookie, a field the origin may vary on) ask for
two URLs of a cached route, and the origin answers each request with a caching policy
drawn for it (`public`, `s-maxage`, plain `max-age`, `private`, `no-store`, a `Set-Cookie`,
`Vary`). Every answer a caller gets that the origin made for another request must be one
the cache may share with it:

- the origin let it be stored (not `private`, `no-store` or with a `Set-Cookie`);
- the same URL, and the same value of every field the answer varies on;
- `scope = "public"`: neither request carried credentials (`Authorization`, a cookie);
- `scope = "key"`: both have the same rate-limit key and the same credentials.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.testing import OriginCall, Reply, Simulator

from .examples import examples
from .fakes import one_route

POLICIES = {
    "public": [("cache-control", "public, max-age=600")],
    "shared": [("cache-control", "s-maxage=600")],
    "plain": [("cache-control", "max-age=600")],
    "none": [],
    "private": [("cache-control", "private, max-age=600")],
    "no-store": [("cache-control", "no-store")],
    "cookie": [("cache-control", "max-age=600"), ("set-cookie", "s=1")],
    "vary": [("cache-control", "max-age=600"), ("vary", "X-Variant")],
}
NOT_STORED = {"private", "no-store", "cookie"}


@dataclass(frozen=True)
class Caller:
    ip: str
    api_key: str | None
    authorization: str | None
    cookie: str | None
    variant: str | None

    def headers(self, serial: int) -> list[tuple[str, str]]:
        fields = [("x-serial", str(serial))]
        for name, value in (
            ("x-api-key", self.api_key),
            ("authorization", self.authorization),
            ("cookie", self.cookie),
            ("x-variant", self.variant),
        ):
            if value is not None:
                fields.append((name, value))
        return fields

    @property
    def credentials(self) -> bool:
        return self.authorization is not None or self.cookie is not None


callers = st.builds(
    Caller,
    ip=st.sampled_from(["198.51.100.7", "203.0.113.9"]),
    api_key=st.sampled_from([None, "k1"]),
    authorization=st.sampled_from([None, None, "Bearer a", "Bearer b"]),
    cookie=st.sampled_from([None, None, "sid=1", "sid=2"]),
    variant=st.sampled_from([None, "x"]),
)


@dataclass(frozen=True)
class Made:
    """A request the origin answered: who asked, for what, and under which policy."""

    caller: Caller
    path: str
    policy: str


@settings(max_examples=examples(400), deadline=None)
@given(
    scope=st.sampled_from(["public", "key"]),
    key=st.sampled_from(["ip", "header:x-api-key"]),
    requests=st.lists(
        st.tuples(callers, st.sampled_from(["/v1/a", "/v1/b"]), st.sampled_from(sorted(POLICIES))),
        min_size=1,
        max_size=25,
    ),
)
def test_an_answer_made_for_one_request_reaches_another_only_where_it_may_be_shared(
    scope: str, key: str, requests: list[tuple[Caller, str, str]]
) -> None:
    policy = {"now": "none"}

    def origin(call: OriginCall) -> Reply:
        serial = call.header("x-serial")
        return Reply(200, POLICIES[policy["now"]], f"made for {serial}")

    cache = {"ttl": "1h", "default_ttl": "10m", "scope": scope}
    sim = Simulator(one_route(limits="1000/second", key=key, cache=cache), origin=origin)
    made: dict[int, Made] = {}
    for serial, (caller, path, drawn) in enumerate(requests):
        policy["now"] = drawn
        answer = sim.request(
            "GET", "https://api.test" + path, ip=caller.ip, headers=caller.headers(serial)
        )
        assert answer.status == 200, answer.text
        if answer.forwarded:
            made[serial] = Made(caller, path, drawn)
        source = int(answer.text.removeprefix("made for "))
        if source == serial:
            continue
        producer = made[source]
        said = (scope, key, caller, path, producer, answer.headers.get("x-cache"))
        assert producer.policy not in NOT_STORED, said
        assert producer.path == path, said
        if producer.policy == "vary":
            assert producer.caller.variant == caller.variant, said
        if scope == "public":
            assert not producer.caller.credentials and not caller.credentials, said
        else:
            own_key = (lambda c: c.ip) if key == "ip" else (lambda c: c.api_key)
            assert own_key(producer.caller) == own_key(caller), said
            assert producer.caller.authorization == caller.authorization, said
            assert producer.caller.cookie == caller.cookie, said
