"""The end-to-end fuzz's requests (tests/e2e/test_hardening_e2e.py) through the whole
gateway on the simulator: the same routes (every algorithm, a key header, a path tenant,
the cache, Idempotency-Key, a pool with breakers and retries, two limits with a cost), the
same generated methods, paths, queries, fields and bodies, thousands of times more cheaply
than on workerd. Every answer is the origin's, a success of the gateway's own, or a 4xx
(or a 502/503/504) with a problem body that says what is wrong: never a 500."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_limiter.testing import OriginCall, Reply, Simulator

from .e2e.test_hardening_e2e import TOKEN, Generated, fuzz_config, requests
from .examples import examples

ORIGIN_FIELD = "x-fuzz-origin"


def _origin(call: OriginCall) -> Reply:
    return Reply(200, {ORIGIN_FIELD: "1", "content-type": "text/plain"}, b"ok")


def _send(sim: Simulator, item: Generated, ip: str) -> tuple[int, str, dict[str, object] | None]:
    """``item`` as the runtime hands it to the Worker; its status, where the answer came
    from, and its problem body (None: none)."""
    headers = [(name, value.decode("latin-1")) for name, value in item.headers]
    if item.chunked:
        headers.append(("transfer-encoding", "chunked"))
    elif item.body or item.method in ("POST", "PUT", "PATCH"):
        headers.append(("content-length", str(len(item.body))))
    answer = sim.request(
        item.method,
        "https://api.test" + item.target,
        headers=headers,
        body=item.body if item.body or "content-length" in dict(headers) else None,
        ip=ip,
    )
    if answer.headers.get(ORIGIN_FIELD) is not None:
        return answer.status, "origin", None
    content_type = answer.headers.get("content-type") or ""
    if content_type.startswith("application/problem+json") and answer.body:
        return answer.status, "problem", answer.json()
    return answer.status, "gateway", None


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    batch=st.lists(
        requests().filter(lambda r: isinstance(r, Generated) and not r.malformed),
        min_size=1,
        max_size=20,
    ),
    ips=st.lists(
        st.sampled_from(["198.51.100.7", "203.0.113.9", "2001:db8::1"]), min_size=20, max_size=20
    ),
)
def test_no_generated_request_gets_a_500_or_an_error_that_does_not_say_why(
    batch: list[Generated], ips: list[str]
) -> None:
    config = fuzz_config("https://origin.test")
    sim = Simulator(config, origin=_origin, admin_token=TOKEN)
    for item, ip in zip(batch, ips, strict=False):
        status, source, problem = _send(sim, item, ip)
        where = f"{item.method} {item.target[:200]} {[n for n, _ in item.headers]}"
        assert status != 500, where
        if source == "origin":
            continue
        if problem is not None:
            assert problem["status"] == status, (where, problem)
            assert isinstance(problem.get("title"), str) and problem["title"], (where, problem)
            assert isinstance(problem.get("detail"), str) and problem["detail"], (where, problem)
            assert status < 500 or status in (502, 503, 504), (where, problem)
        else:
            # The gateway's own answers without a problem: the admin API's successes and
            # the cache's (a replay, a HIT, a 304 to a conditional request).
            assert status in (200, 204, 304) or item.method == "HEAD", (where, status)
