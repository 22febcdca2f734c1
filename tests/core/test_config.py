"""The strict config parser: what it accepts, and one error naming every problem."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from edge_limiter.core.config import parse_config
from edge_limiter.core.errors import ConfigError
from edge_limiter.core.validation import shown

ROOT = Path(__file__).resolve().parents[2]


def route(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"name": "r", "match": {"path": "/v1/*"}, "limits": "10/second"}
    base.update(fields)
    return base


def config(*routes: dict[str, object], **top: object) -> dict[str, object]:
    return {"origin": "https://api.example.com", "routes": list(routes), **top}


def problems_of(raw: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value.problems


def test_example_config_file_is_valid() -> None:
    data = tomllib.loads((ROOT / "edge-limiter.toml").read_text())
    parsed = parse_config({k: v for k, v in data.items() if k != "env"})
    assert [r.name for r in parsed.routes] == [
        "login",
        "search",
        "tenant-api",
        "reports",
        "payments",
        "catalog",
        "api",
    ]
    login = parsed.routes[0]
    assert login.limits.algorithm == "sliding_log"
    assert not login.failure.fail_open
    assert [(lim.rate.quota, lim.rate.window_ms) for lim in login.limits.limits] == [
        (5, 60_000),
        (20, 3_600_000),
    ]
    search = parsed.routes[1].limits.limits
    assert [(lim.capacity, lim.rate.quota) for lim in search] == [(20, 10), (1000, 1000)]
    assert parsed.warnings == ()
    by_name = {route.name: route for route in parsed.routes}
    assert by_name["payments"].idempotency is not None
    assert by_name["payments"].idempotency.required
    assert (
        by_name["catalog"].cache is not None and by_name["catalog"].cache.default_ttl_ms == 300_000
    )


def test_defaults() -> None:
    parsed = parse_config(config(route()))
    (r,) = parsed.routes
    assert r.limits.algorithm == "sliding_window"
    assert r.limits.cost == 1
    assert r.limits.shadow is False
    assert r.limits.write_behind_ms == 0  # every decision stored before the answer
    assert r.failure.fail_open is True
    assert r.failure.store_timeout_ms == 1000
    assert [str(p) for p in r.limits.key.parts] == ["ip"]
    assert r.limits.key.ipv6_prefix == 64
    assert r.match.methods is None
    assert r.match.path.case_insensitive is False
    (origin,) = r.forward.pool.origins
    assert origin.url == "https://api.example.com" and origin.name == "api.example.com"
    assert r.forward.timeout_ms == 30_000 and origin.timeout_ms == 30_000
    assert r.forward.retry.attempts == 3
    assert parsed.matrix_params == "keep"
    assert parsed.method_override == "apply"


def test_first_matching_route_wins_and_unmatched_is_none() -> None:
    parsed = parse_config(
        config(
            route(name="login", match={"methods": ["POST"], "path": "/v1/login"}),
            route(name="all", match={"path": "/v1/*"}),
        )
    )
    assert parsed.match("POST", "h", "/v1/login")[0].name == "login"  # type: ignore[index]
    assert parsed.match("GET", "h", "/v1/login")[0].name == "all"  # type: ignore[index]
    assert parsed.match("GET", "h", "/v2/x") is None


def test_host_and_path_params() -> None:
    parsed = parse_config(
        config(route(match={"path": "/t/{tenant}/items/{id}", "host": "*.example.com"}))
    )
    matched = parsed.match("GET", "api.example.com", "/t/acme/items/42")
    assert matched is not None
    assert matched[1] == {"tenant": "acme", "id": "42"}
    assert parsed.match("GET", "example.com", "/t/acme/items/42") is None


def test_limits_as_list_with_names() -> None:
    parsed = parse_config(
        config(route(limits=[{"rate": "10/second", "name": "burst"}, "1000/day"]))
    )
    assert [lim.name for lim in parsed.routes[0].limits.limits] == ["burst", "1000-per-day"]


def test_burst_per_limit_and_route_burst_on_the_shortest_window() -> None:
    per_limit = parse_config(
        config(
            route(
                algorithm="token_bucket",
                limits=[{"rate": "1000/hour", "burst": 1500}, {"rate": "10/second", "burst": 20}],
            )
        )
    ).routes[0]
    assert [(lim.rate.quota, lim.burst) for lim in per_limit.limits.limits] == [
        (1000, 1500),
        (10, 20),
    ]
    route_level = parse_config(
        config(route(algorithm="gcra", limits="1000/hour; 10/second", burst=20))
    ).routes[0]
    assert [(lim.rate.quota, lim.burst) for lim in route_level.limits.limits] == [
        (1000, None),
        (10, 20),
    ]
    assert [lim.name for lim in route_level.limits.limits] == [
        "1000-per-hour",
        "10-per-second-burst-20",
    ]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"limits": [{"rate": "10/s", "burst": 10**9 + 1}]}, "route 'r'.limits[0].burst"),
        ({"limits": "10/s", "burst": 10**9 + 1}, "route 'r'.burst"),
        ({"limits": [{"rate": "10/s", "burst": 0}]}, "route 'r'.limits[0].burst"),
    ],
)
def test_a_burst_out_of_range_is_a_named_problem_not_a_crash(
    fields: dict[str, object], field: str
) -> None:
    problems = problems_of(config(route(name="r", algorithm="token_bucket", **fields)))
    assert any(p.startswith(f"{field}: must be an integer from 1 to 1000000000") for p in problems)


def test_duplicate_names_are_reported_even_with_other_errors() -> None:
    problems = problems_of(config(route(name="a"), route(name="a", limits="10/fortnight")))
    assert any("route 'a'.name: is used by an earlier route" in p for p in problems)
    # The second route's own problems name it by its place: the first 'a' is fine.
    assert any(p.startswith("route 'a' (routes[1]).limits: ") for p in problems)
    assert not any(p.startswith("route 'a'.limits") for p in problems)


def test_a_route_that_can_never_match_is_a_warning_naming_both() -> None:
    parsed = parse_config(
        config(
            route(name="all", match={"path": "/v1/*"}),
            route(name="login", match={"path": "/v1/login", "methods": ["POST"]}),
            route(name="v2", match={"path": "/v2/*"}),
            route(name="posts", match={"path": "/v2/*", "methods": ["POST"], "host": "a.test"}),
        )
    )
    assert len(parsed.warnings) == 2
    assert "route 'login'" in parsed.warnings[0] and "'all'" in parsed.warnings[0]
    assert "route 'posts'" in parsed.warnings[1] and "'v2'" in parsed.warnings[1]
    narrower = parse_config(
        config(
            route(name="gets", match={"path": "/v1/*", "methods": ["GET"]}),
            route(name="any", match={"path": "/v1/login"}),
            route(name="host", match={"path": "/v1/*", "host": "a.test"}),
            route(name="other", match={"path": "/v1/*"}),
        )
    )
    assert narrower.warnings == ()


def test_a_cache_shared_by_every_key_of_a_keyed_route_is_a_warning_unless_said() -> None:
    # A probe's note: on a header:x-api-key route one key's answer was served to every
    # other key (as documented for scope = "public", the default), with no word of it.
    def warnings(**cache: str) -> tuple[str, ...]:
        keyed = route(key="header:x-api-key", cache={"ttl": "5m", **cache})
        return parse_config(config(keyed)).warnings

    said = warnings()
    assert len(said) == 1 and ".cache.scope" in said[0] and "header:x-api-key" in said[0]
    assert warnings(scope="public") == () and warnings(scope="key") == ()
    assert parse_config(config(route(cache={"ttl": "5m"}))).warnings == ()  # keyed by ip


def test_records_or_entries_shared_by_every_caller_behind_one_address_are_a_warning() -> None:
    def warnings(**fields: object) -> tuple[str, ...]:
        return parse_config(config(route(**fields))).warnings

    idempotent = {"idempotency": {"mode": "optional"}}
    said = warnings(**idempotent)
    assert len(said) == 1 and ".idempotency" in said[0] and "fingerprint_headers" in said[0]
    assert "(ip)" in said[0]
    assert (
        len(warnings(key=["ip", "path:tenant"], match={"path": "/t/{tenant}"}, **idempotent)) == 1
    )
    # Keyed on the caller, or with the credential named: nothing to say.
    assert warnings(key="header:x-api-key", idempotency={"mode": "optional"}) == ()
    assert warnings(key=["ip", "cookie:sid"], idempotency={"mode": "optional"}) == ()
    named = {"mode": "optional", "fingerprint_headers": ["x-auth-token"]}
    assert warnings(idempotency=named) == ()
    per_address = warnings(cache={"ttl": "5m", "scope": "key"})
    assert len(per_address) == 1 and ".cache.scope" in per_address[0]
    assert warnings(cache={"ttl": "5m", "scope": "public"}) == ()


def test_paths_settings_case_and_matrix() -> None:
    parsed = parse_config(
        config(
            route(name="a", match={"path": "/V1/Login"}),
            route(name="b", match={"path": "/x", "case_insensitive": False}),
            paths={"case_insensitive": True, "matrix_params": "strip"},
        )
    )
    assert parsed.matrix_params == "strip"
    assert parsed.routes[0].match.path.case_insensitive
    assert not parsed.routes[1].match.path.case_insensitive
    assert parsed.match("GET", "h", "/v1/LOGIN")[0].name == "a"  # type: ignore[index]
    assert parsed.match("GET", "h", "/X") is None
    # A pattern that holds ';params' can never match where they are stripped or refused.
    for mode in ("strip", "reject"):
        said = problems_of(config(route(match={"path": "/p;v=1"}), paths={"matrix_params": mode}))
        assert len(said) == 1 and said[0].startswith("route 'r'.match.path: holds ';'"), said
    kept = config(route(match={"path": "/p;v=1"}), paths={"matrix_params": "keep"})
    assert parse_config(kept).match("GET", "h", "/p;v=1") is not None


def test_one_error_lists_every_problem_with_route_and_field() -> None:
    problems = problems_of(
        config(
            route(name="a", limits="10/fortnight", algorithm="leaky"),
            route(name="b", cost=0, shadow="yes", on_store_error="maybe", key="header:"),
            route(name="c", match={"path": "no-slash", "methods": ["GET POST"]}, burst=5),
        )
    )
    text = "\n".join(problems)
    assert "route 'a'.limits" in text and "'10/fortnight'" in text
    assert "route 'a'.algorithm" in text and "'leaky'" in text
    assert "route 'b'.cost" in text
    assert "route 'b'.shadow" in text
    assert "route 'b'.on_store_error" in text
    assert "route 'b'.key" in text
    assert "route 'c'.match.path" in text
    assert "route 'c'.match.methods" in text
    assert "route 'c'.burst" in text  # burst on the default sliding_window
    assert len(problems) == 9, problems


def test_write_behind_is_an_opt_in_bounded_interval() -> None:
    (r,) = parse_config(config(route(write_behind="50ms"))).routes
    assert r.limits.write_behind_ms == 50
    for bad in ("0ms", "1 minute", "soon", 50):
        text = "\n".join(problems_of(config(route(name="w", write_behind=bad))))
        assert "route 'w'.write_behind" in text, bad


def test_leases_are_opt_in_with_a_ttl_per_algorithm_family() -> None:
    (off,) = parse_config(config(route())).routes
    assert off.limits.lease_ttl_ms == 0
    ttls = {
        algorithm: parse_config(config(route(algorithm=algorithm, leases=True)))
        .routes[0]
        .limits.lease_ttl_ms
        for algorithm in ("fixed_window", "sliding_window", "token_bucket", "gcra")
    }
    assert ttls == {"fixed_window": 1000, "sliding_window": 1000, "token_bucket": 500, "gcra": 500}
    (custom,) = parse_config(config(route(leases={"ttl": "250ms"}))).routes
    assert custom.limits.lease_ttl_ms == 250
    (explicit_off,) = parse_config(config(route(leases=False))).routes
    assert explicit_off.limits.lease_ttl_ms == 0


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"algorithm": "sliding_log", "leases": True}, "'sliding_log' counts every request"),
        ({"leases": "yes"}, "must be true, false or a table"),
        ({"leases": {"ttl": "0ms"}}, "leases.ttl"),
        ({"leases": {"ttl": "2 minutes"}}, "leases.ttl"),
        ({"leases": {"size": 3}}, "leases.size: unknown field"),
        # A bucket keeps ttl x rate of refill back: 10/s with a 1 s ttl leaves nothing.
        ({"algorithm": "token_bucket", "leases": {"ttl": "1s"}}, "use a ttl of at most 900 ms"),
        # No ttl keeps less than a unit back: a burst of 1 cannot lease at all.
        ({"algorithm": "gcra", "limits": "1/hour", "leases": True}, "a burst of at least 2"),
        (
            {"algorithm": "token_bucket", "limits": "1000/minute", "burst": 1, "leases": True},
            "a burst of at least 2",
        ),
    ],
)
def test_bad_leases_name_the_route_and_field(fields: dict[str, object], says: str) -> None:
    text = "\n".join(problems_of(config(route(name="hot", **fields))))
    assert "route 'hot'.leases" in text and says in text, text


def test_error_message_is_readable() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config(route(limits="ten per second")))
    message = str(info.value)
    assert message.startswith("invalid edge-limiter config (1 problem):")
    assert "route 'r'.limits" in message
    assert "'ten per second'" in message


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ([], "must be a table"),
        ({"routes": [], "colour": "red"}, "config.colour: unknown field"),
        ({"routes": [], "store_timeout_ms": 0}, "config.store_timeout_ms"),
        ({"routes": [], "origin": "ftp://x"}, "config.origin"),
        ({"routes": "nope"}, "config.routes"),
        ({"routes": [route()]}, "no origin to forward to"),
        (config(route(), route()), "names must be unique"),
        (config(route(name="bad name")), "routes[0].name"),
        (config(route(name="a:b")), "routes[0].name"),
        (config(route(extra=1)), "route 'r'.extra: unknown field"),
        (config(route(match=None)), "route 'r'.match: is required"),
        (config(route(match={"path": "/x", "verb": "GET"})), "route 'r'.match.verb"),
        (config(route(match={"path": "/x", "host": "https://x"})), "route 'r'.match.host"),
        (config(route(limits="10/s; 20/second")), "same window"),
        (
            config(route(limits=[{"rate": "1/s", "name": "a"}, {"rate": "2/m", "name": "a"}])),
            "unique",
        ),
        (config(route(limits="5/second", cost=6)), "exceeds the smallest limit"),
        (config(route(algorithm="gcra", burst=2, cost=3)), "exceeds the smallest limit"),
        (config(route(algorithm="sliding_log", limits="20000/day")), "sliding_log"),
        (config(route(key=["ip", "ip"])), "same key part twice"),
        (config(route(key="colour")), "unknown key part"),
        (config(route(ipv6_prefix=129)), "route 'r'.ipv6_prefix"),
        (config(route(origin="not a url")), "route 'r'.origin"),
        (config(route(cost=True)), "route 'r'.cost"),
        (config(route(key="header:x api")), "is not a header name"),
        (config(route(key="path:tenant")), "path:tenant names a path parameter"),
        (config(route(name="login\n")), "routes[0].name"),
        (config(route(timeout="0s")), "route 'r'.timeout"),
        (config(route(timeout=30)), "route 'r'.timeout"),
        (config(route(algorithm="token_bucket", limits=[{"rate": "1/s", "burst": 0}])), "burst"),
        (
            config(route(algorithm="token_bucket", limits=[{"rate": "1/s", "burst": 2}], burst=3)),
            "set it in one place only",
        ),
        (config(route(limits=[{"rate": "1/s", "burst": 2}])), "only applies to token_bucket"),
        (config(route(limits=[{"rate": "1/s", "burst": 2}])), "route 'r'.limits: a burst"),
        (config(route(limits="1/s", burst=2)), "route 'r'.burst: a burst"),
        (config(route(limits=[{"rate": "1/s", "size": 2}])), "limits[0].size: unknown field"),
        ({"routes": [], "paths": {"matrix_params": "drop"}}, "config.paths.matrix_params"),
        ({"routes": [], "method_override": "honour"}, "config.method_override"),
        ({"routes": [], "paths": {"case": True}}, "config.paths.case: unknown field"),
        ({"routes": [], "origin_timeout": "forever"}, "config.origin_timeout"),
        (config(route(match={"path": "/x", "methods": ["GET POST"]})), "match.methods"),
    ],
)
def test_invalid_configs(raw: object, fragment: str) -> None:
    assert any(fragment in p for p in problems_of(raw)), problems_of(raw)


def test_route_origin_overrides_default() -> None:
    parsed = parse_config({"routes": [route(origin="http://127.0.0.1:9000/", timeout="2s")]})
    assert parsed.forward is None
    (origin,) = parsed.routes[0].forward.pool.origins
    assert origin.url == "http://127.0.0.1:9000" and origin.timeout_ms == 2_000
    assert parsed.routes[0].forward.timeout_ms == 2_000


def test_methods_may_be_any_token() -> None:
    parsed = parse_config(config(route(match={"path": "/x", "methods": ["purge", "GET"]})))
    # GET takes HEAD too: an origin answers HEAD by running GET.
    assert parsed.routes[0].match.methods == frozenset({"PURGE", "GET", "HEAD"})
    assert not parsed.warnings  # workerd hands PURGE to the Worker
    # It answers a made-up method itself (501) before the Worker runs: said as a warning.
    odd = parse_config(config(route(match={"path": "/x", "methods": ["BREW", "PROPFIND"]})))
    (warning,) = odd.warnings
    assert "match.methods" in warning and "BREW" in warning and "PROPFIND" not in warning
    parsed = parse_config(config(route(match={"path": "/x", "methods": ["POST"]})))
    assert parsed.routes[0].match.methods == frozenset({"POST"})


def test_explain_says_which_leased_routes_are_planned() -> None:
    from edge_limiter.core.config.describe import describe_route

    def planned(**extra: object) -> object:
        parsed = parse_config(config(route(leases=True, **extra)))
        leases = describe_route(parsed.routes[0])["leases"]
        assert leases is not None and leases["ttl_ms"] == 1_000
        return leases["planned"]

    assert planned(limits="100/s", algorithm="sliding_window") is True
    # Longer than 10 ttls, several limits, or another algorithm: ordinary leases.
    assert planned(limits="100/minute", algorithm="sliding_window") is False
    assert planned(limits="100/s; 1000/hour", algorithm="sliding_window") is False
    assert planned(limits="100/s", algorithm="fixed_window") is False
    no_leases = parse_config(config(route()))
    assert describe_route(no_leases.routes[0])["leases"] is None


def test_client_ip_header_is_a_field_name() -> None:
    assert parse_config(config(route())).client_ip_header is None
    named = parse_config(config(route(), client_ip_header="X-Forwarded-For"))
    assert named.client_ip_header == "x-forwarded-for"


@pytest.mark.parametrize("value", ["", "X Forwarded", 5, "Host", "content-length", "Forwarded"])
def test_client_ip_header_refuses_what_cannot_carry_an_address(value: object) -> None:
    problems = problems_of(config(route(), client_ip_header=value))
    assert any(p.startswith("config.client_ip_header") for p in problems)


def test_forwarded_host_is_off_unless_asked_for() -> None:
    assert parse_config(config(route())).forwarded_host is False
    assert parse_config(config(route(), forwarded_host=True)).forwarded_host is True
    problems = problems_of(config(route(), forwarded_host="yes"))
    assert any(p.startswith("config.forwarded_host: must be true or false") for p in problems)
    # The client's address cannot go in a field that says the host asked for.
    problems = problems_of(
        config(route(), forwarded_host=True, client_ip_header="X-Forwarded-Proto")
    )
    assert any("config.client_ip_header" in p and "X-Forwarded-Proto" in p for p in problems)


@pytest.mark.parametrize(
    "field",
    [
        "X-Forwarded-Proto",  # always the client's scheme (README)
        "X-Forwarded-Host",
        "X-Original-URL",
        "X-HTTP-Method-Override",
        "Idempotency-Key",
    ],
)
def test_the_clients_address_never_goes_in_a_field_that_means_something_else(field: str) -> None:
    # A probe's finding: client_ip_header = "Idempotency-Key" gave every request from one
    # address the same key at the origin; "X-Forwarded-Proto" an address for a scheme.
    problems = problems_of(config(route(), client_ip_header=field))
    assert any(p.startswith("config.client_ip_header:") for p in problems), problems


def test_the_clients_address_never_replaces_a_key_header_that_was_counted() -> None:
    keyed = route(name="search", key="header:x-api-key")
    problems = problems_of(config(keyed, client_ip_header="X-Api-Key"))
    assert any(p.startswith("route 'search'.key:") for p in problems), problems


def test_origin_headers_never_set_a_method_path_or_idempotency_field() -> None:
    for field in ("X-HTTP-Method-Override", "X-Original-URL", "Idempotency-Key"):
        problems = problems_of(config(route(), origin_headers={field: "x"}))
        assert any(f"origin_headers.{field}" in p for p in problems), (field, problems)
    # A fixed prefix or scheme for an origin behind the gateway's path is the operator's.
    fine = parse_config(config(route(), origin_headers={"X-Forwarded-Prefix": "/api"}))
    assert fine.origin_headers[0].name == "x-forwarded-prefix"


@pytest.mark.parametrize(
    ("written", "advice"),
    [
        ("Token-Bucket", "(write 'token_bucket')"),
        ("sliding window", "(write 'sliding_window')"),
        ("leaky_bucket", "is 'gcra'"),
        ("leaky-bucket", "is 'gcra'"),
        ("moving_window", "is 'sliding_log'"),
    ],
)
def test_an_algorithm_by_another_name_says_what_to_write(written: str, advice: str) -> None:
    [problem] = problems_of(config(route(algorithm=written)))
    assert "'r'.algorithm: must be one of" in problem and advice in problem


def test_any_choice_spelt_in_another_case_says_what_to_write() -> None:
    [problem] = problems_of(config(route(on_store_error="Closed")))
    assert "must be one of open, closed, got 'Closed' (write 'closed')" in problem


def test_method_decides_where_the_first_route_a_path_fits_names_methods() -> None:
    parsed = parse_config(
        config(
            route(name="posts", match={"path": "/v1/posts", "methods": ["POST"]}),
            route(name="pay", match={"path": "/v1/pay"}, idempotency={"mode": "optional"}),
            route(name="host", match={"path": "/v1/h", "host": "a.test", "methods": ["GET"]}),
            route(name="all", match={"path": "/v1/*"}),
        )
    )
    assert parsed.method_decides("api.example.com", "/v1/posts")
    assert parsed.method_decides("api.example.com", "/v1/pay")  # idempotency: POST, PATCH
    assert parsed.method_decides("a.test", "/v1/h")
    assert not parsed.method_decides("b.test", "/v1/h")  # only 'all' fits it there
    assert not parsed.method_decides("api.example.com", "/v1/other")
    assert not parsed.method_decides("api.example.com", "/elsewhere")


@pytest.mark.parametrize(
    ("origin", "said"),
    [
        ("https://user:pw@api.example.com", "must not carry credentials"),
        ("https://api.example.com:99999", "invalid port"),
        ("https://api.example.com/a b", "whitespace"),
    ],
)
def test_a_top_level_origin_is_checked_like_a_pools(origin: str, said: str) -> None:
    # One problem, the origin's own: not one more per route that would have used it.
    [problem] = problems_of(config(route(), route(name="s", match={"path": "/s"}), origin=origin))
    assert problem.startswith("config.origin:") and said in problem


def test_a_config_without_routes_is_valid_and_says_nothing_is_limited() -> None:
    parsed = parse_config({"origin": "https://api.example.com"})
    assert parsed.routes == ()
    assert any("there are no routes: nothing is limited" in w for w in parsed.warnings)


def test_a_path_pattern_with_a_query_is_refused_and_dates_are_shown_as_written() -> None:
    (said,) = problems_of(config(route(match={"path": "/p4?x=1"})))
    assert "route 'r'.match.path" in said and "query" in said and "key = 'query:NAME'" in said
    written = tomllib.loads('[[routes]]\nname = "r"\nmatch = { path = "/x" }\nlimits = 1979-05-27')
    problems = problems_of({"origin": "https://a.test", **written})
    assert any("1979-05-27 (a TOML date" in p for p in problems), problems
    timed = tomllib.loads('origin = "https://a.test"\norigin_timeout = 07:32:00')
    assert any("got 07:32:00 (a TOML date or time)" in p for p in problems_of(timed))


def test_forms_users_of_peers_write_are_taken_or_refused_saying_what_to_write() -> None:
    # A config sweep's findings.
    every = parse_config(config(route(match={"path": "/star", "methods": ["*"]})))
    assert every.routes[0].match.methods is None  # ["*"] is every method, as "*" is
    mixed = problems_of(config(route(match={"path": "/x", "methods": ["*", "GET"]})))
    assert any("write methods = '*' alone" in p for p in mixed)
    anything = parse_config(config(route(match={"path": "/x", "methods": ["ANY"]}))).warnings
    assert any("every method is written methods = '*'" in w for w in anything)
    express = parse_config(config(route(match={"path": "/v1/u/:id"}))).warnings
    assert any("':id'" in w and "{id}" in w for w in express)
    thousands = problems_of(config(route(limits="1,000/hour")))
    assert any("thousands separator" in p for p in thousands)
    glob = problems_of(config(route(cache={"ttl": "5m", "ignore_query": ["utm_*"]})))
    assert any("takes names, not patterns" in p for p in glob)
    cookie = problems_of(config(route(key="cookie:")))
    assert any("'cookie:session'" in p for p in cookie)


def test_settings_that_can_never_apply_are_warnings() -> None:
    posts = route(match={"path": "/x", "methods": ["POST"]}, cache={"ttl": "5m"})
    assert any(".cache: never stores" in w for w in parse_config(config(posts)).warnings)
    heads = route(match={"path": "/x", "methods": ["HEAD"]}, cache={"ttl": "5m"})
    assert any(".cache: never stores" in w for w in parse_config(config(heads)).warnings)
    gets = route(match={"path": "/x", "methods": ["GET"]}, cache={"ttl": "5m"})
    assert not any(".cache" in w for w in parse_config(config(gets)).warnings)
    gets = route(match={"path": "/x", "methods": ["GET"]}, idempotency={"mode": "required"})
    assert any(".idempotency: protects nothing" in w for w in parse_config(config(gets)).warnings)
    under = parse_config(config(route(match={"path": "/v1/*"}), admin={"prefix": "/v1"}))
    assert any("admin API's prefix" in w for w in under.warnings)
    fine = parse_config(config(route(match={"path": "/v1/*"})))
    assert not any("admin API's prefix" in w for w in fine.warnings)


def test_explain_takes_an_internationalised_host_as_written() -> None:
    from edge_limiter.core.explain import explain

    parsed = parse_config(
        config(route(name="books", match={"path": "/c", "host": "bücher.example"}))
    )
    for url in (
        "http://bücher.example/c",
        "http://xn--bcher-kva.example/c",
        "http://Bücher.example:80/c",
    ):
        assert explain(parsed, "GET", url)["route"] == "books", url


def test_the_config_checks_hold_for_underscore_spellings_and_other_cases() -> None:
    # A regression probe's findings on the checks above.
    for field in ("x_forwarded_proto", "idempotency_key", "X_HTTP_Method_Override"):
        problems = problems_of(config(route(), client_ip_header=field))
        assert any(p.startswith("config.client_ip_header:") for p in problems), field
    keyed = route(name="search", key="header:x-api-key")
    assert any(
        "route 'search'.key" in p for p in problems_of(config(keyed, client_ip_header="x_api_key"))
    )
    for field in ("x_original_url", "X_HTTP_Method_Override", "idempotency_key"):
        problems = problems_of(config(route(), origin_headers={field: "x"}))
        assert any(f"origin_headers.{field}" in p for p in problems), field
    upper = parse_config(config(route(match={"path": "/_EDGE-LIMITER/status"}))).warnings
    assert any("admin API's prefix" in w for w in upper)
    for path in ("/v1/::1", "/v1/:1", "/v1/:id.json"):
        assert not any(
            "is matched as written" in w
            for w in parse_config(config(route(match={"path": path}))).warnings
        ), path
    post_put = route(
        match={"path": "/x", "methods": ["POST"]},
        idempotency={"mode": "optional", "methods": ["PUT"]},
    )
    assert any(
        ".idempotency: protects nothing" in w for w in parse_config(config(post_put)).warnings
    )
    # A PUT route protects POSTs made PUTs by an override: no warning.
    put = route(match={"path": "/x", "methods": ["PUT"]}, idempotency={"mode": "optional"})
    assert not any("protects nothing" in w for w in parse_config(config(put)).warnings)
    month = problems_of(config(route(limits="10000/M")))
    assert any("'M' could mean a month or a minute" in p for p in month)


def test_an_internationalised_host_is_the_name_browsers_send() -> None:
    # straße stays straße (xn--strae-oqa), as browsers and the runtime map it; Python's
    # idna codec (IDNA 2003) made it strasse, which no request carries.
    from edge_limiter.core.explain import explain

    parsed = parse_config(config(route(name="s", match={"path": "/c", "host": "straße.example"})))
    assert explain(parsed, "GET", "http://xn--strae-oqa.example/c")["route"] == "s"
    assert explain(parsed, "GET", "http://straße.example/c")["route"] == "s"
    assert explain(parsed, "GET", "http://strasse.example/c")["route"] is None


def test_fields_that_would_change_nothing_are_refused_or_warned() -> None:
    # An empty limit name is not "no name": it is refused like any other bad name.
    empty = problems_of(config(route(limits=[{"rate": "10/s", "name": ""}])))
    assert any("route 'r'.limits[0].name" in p for p in empty)
    # 'global' is one counter: combined with another part it would change nothing.
    for key in (["global", "ip"], ["header:x-k", "global"]):
        problems = problems_of(config(route(key=key)))
        assert any("route 'r'.key" in p and "'global'" in p for p in problems), key
    assert problems_of(config(route(key=["global", "global"]))) == [
        "route 'r'.key: names the same key part twice"
    ]
    assert parse_config(config(route(key="global"))).routes[0].limits.key.parts
    # Address aggregation on a key without an address.
    header = parse_config(config(route(key="header:x-k", ipv6_prefix=48, ipv4_prefix=24)))
    assert [w.split(":")[0] for w in header.warnings] == [
        "route 'r'.ipv4_prefix",
        "route 'r'.ipv6_prefix",
    ]
    assert parse_config(config(route(key=["ip", "header:x-k"], ipv6_prefix=48))).warnings == ()
    # A route that opts out of a shadow the top level imposes everywhere.
    everywhere = parse_config(config(route(shadow=False), shadow=True)).warnings
    assert any("route 'r'.shadow: has no effect" in w for w in everywhere)
    # What a shadow route ignores: failing closed (it blocks nothing) and leases.
    for top in ({}, {"shadow": True}):
        shadowed = route(
            on_store_error="closed", leases={"ttl": "1s"}, **({} if top else {"shadow": True})
        )
        said = parse_config(config(shadowed, **top)).warnings
        assert any("route 'r'.on_store_error: has no effect under" in w for w in said), said
        assert any("route 'r'.leases: has no effect under" in w for w in said), said
    # The route is read as the gateway runs it (check-config --json, /api/config say so).
    everyone = parse_config(config(route(leases={"ttl": "1s"}), shadow=True)).routes[0].limits
    assert everyone.shadow is True and everyone.lease_ttl_ms == 0
    plain = parse_config(config(route(on_store_error="closed", leases={"ttl": "1s"}))).warnings
    off = parse_config(config(route(), deny_cache={"enabled": False, "max_ttl": "5s"})).warnings
    assert any("config.deny_cache: max_ttl and max_keys have no effect" in w for w in off)
    assert not any("has no effect" in w for w in plain)
    assert parse_config(config(route(shadow=False))).warnings == ()
    assert parse_config(config(route(shadow=True), shadow=True)).warnings == ()
    # A limit another of the route's always denies before (see never_binding).
    loose = parse_config(config(route(limits="10/minute; 5/hour"))).warnings
    assert len(loose) == 1 and loose[0].startswith("route 'r'.limits: the limit '10-per-minute'")
    assert parse_config(config(route(limits="10/second; 1000/hour"))).warnings == ()


def test_values_in_messages_are_written_as_the_config_writes_them() -> None:
    assert problems_of(config(route(cost=True))) == [
        "route 'r'.cost: must be a positive integer, got true"
    ]
    missing = route()
    del missing["limits"]
    assert problems_of(config(missing))[0].endswith("got nothing (missing or null)")
    nested = problems_of(config(route(limits=[None])))
    assert nested == [
        "route 'r'.limits[0]: must be a rate string or a table { rate, burst, name }, got "
        "nothing (missing or null)"
    ]
    assert shown([True, None, {"a": False}]) == "[true, null, {'a': false}]"


def test_retry_and_breaker_settings_that_cannot_act_are_warnings() -> None:
    def warned(*routes: dict[str, object], **top: object) -> list[str]:
        return list(parse_config(config(*routes, **top)).warnings)

    posts = route(match={"path": "/p", "methods": ["POST", "PATCH"]}, retry={"attempts": 5})
    assert any("route 'r'.retry: has no effect" in w for w in warned(posts))
    never = {**posts, "retry": {"attempts": 1}}  # saying "never retry" is no mistake
    assert not any(".retry" in w for w in warned(never))
    keyed = {**posts, "idempotency": {"mode": "required"}}
    assert not any(".retry" in w for w in warned(keyed))
    puts = route(match={"path": "/p", "methods": ["POST", "PUT"]}, retry={"attempts": 5})
    assert not any(".retry" in w for w in warned(puts))
    assert not any(".retry" in w for w in warned(route(retry={"attempts": 5})))  # all methods
    once = route(retry={"attempts": 1, "base": "1s", "budget": 0.5})
    assert any("route 'r'.retry.base: has no effect" in w and "budget" in w for w in warned(once))
    assert not any(".retry" in w for w in warned(route(retry={"attempts": 1})))
    never = route(retry={"attempts": 3, "budget": 0, "min_per_second": 0})
    assert any("route 'r'.retry: no retry can ever run" in w for w in warned(never))
    assert not any(".retry" in w for w in warned(route(retry={"attempts": 3, "budget": 0})))
    pool = {
        "breaker": {"slow_call": "5s"},
        "origins": [{"name": "a", "url": "https://a.test", "timeout": "5s"}],
    }
    slow = warned(route(pool="p"), pools={"p": pool})
    assert any("pool 'p'.breaker.slow_call: has no effect" in w for w in slow)
    pool["breaker"] = {"slow_call": "4s"}
    assert not any("slow_call" in w for w in warned(route(pool="p"), pools={"p": pool}))


def test_a_lease_reserve_that_eats_the_burst_is_a_warning() -> None:
    def warned(limits: str, algorithm: str = "token_bucket") -> list[str]:
        leased = route(limits=limits, algorithm=algorithm, leases=True)
        return [w for w in parse_config(config(leased)).warnings if ".leases" in w]

    (small,) = warned("4/hour")
    assert "keeps 1 of the 4 units" in small and "do not suit a limit this small" in small
    (fast,) = warned("5000/second", "gcra")
    assert "keeps 2500 of the 5000 units" in fast and "a shorter ttl keeps less" in fast
    assert warned("1000/hour") == [] and warned("5/minute", "fixed_window") == []


def test_more_fields_that_change_nothing_are_warnings() -> None:
    keyed = route(
        match={"path": "/p", "methods": ["POST"]},
        idempotency={"fingerprint_headers": ["Authorization", "x-v", "idempotency-key"]},
    )
    warned = parse_config(config(keyed)).warnings
    assert any("fingerprint_headers[0]: authorization is part of every" in w for w in warned)
    assert any("fingerprint_headers[2]: idempotency-key is the record's key" in w for w in warned)
    assert not any("fingerprint_headers[1]" in w for w in warned)
    one = {"origins": [{"name": "a", "url": "https://a.test", "continents": ["EU"]}]}
    lone = parse_config(config(route(pool="p"), pools={"p": one})).warnings
    assert any("pool 'p'.origins[0].continents: has no effect" in w for w in lone)
    two = {"origins": [*one["origins"], {"name": "b", "url": "https://b.test"}]}
    assert not any(
        "has no effect" in w
        for w in parse_config(config(route(pool="p"), pools={"p": two})).warnings
    )
    shadowed = parse_config(config(route(), shadow=True, deny_cache={"max_keys": 10})).warnings
    assert any("config.deny_cache: has no effect" in w for w in shadowed)
    assert parse_config(config(route(), deny_cache={"max_keys": 10})).warnings == ()


def test_a_limit_may_have_its_own_algorithm() -> None:
    mixed = route(
        algorithm="token_bucket",
        limits=[
            {"rate": "10/second", "burst": 20},
            {"rate": "1000/day", "algorithm": "fixed_window"},
            {"rate": "100/minute", "algorithm": "token_bucket"},  # the route's: ordinary
        ],
    )
    limits = parse_config(config(mixed)).routes[0].limits.limits
    assert [lim.algorithm for lim in limits] == ["", "fixed_window", ""]
    problems = problems_of(config(route(limits=[{"rate": "5/s", "algorithm": "leaky"}])))
    assert any("route 'r'.limits[0].algorithm" in p for p in problems)
    burst = problems_of(
        config(route(limits=[{"rate": "5/s", "burst": 9, "algorithm": "fixed_window"}]))
    )
    assert any("a burst only applies to" in p and "not fixed_window" in p for p in burst)
    leased = problems_of(config({**mixed, "leases": True}))
    assert any("leases need one algorithm" in p for p in leased)


# --- a probe of the checker's messages and of configs it accepted (fifteenth session) ---


def test_refunding_what_the_origin_served_is_a_warning() -> None:
    served = parse_config(config(route(refund_on=[200, 304, 503])))
    (warning,) = [w for w in served.warnings if ".refund_on" in w]
    assert "answered 200, 304" in warning and "never counted" in warning
    failures = parse_config(config(route(refund_on=[502, 503, 504])))
    assert not any(".refund_on" in w for w in failures.warnings)


def test_an_origin_field_that_replaces_the_counted_header_is_a_warning() -> None:
    keyed = route(key="header:X_Api_Key")
    top = parse_config(config(keyed, origin_headers={"X-Api-Key": "$GATEWAY_KEY"}))
    assert any("route 'r'.key: counts the client's 'x_api_key'" in w for w in top.warnings)
    pool = {"origins": [{"name": "a", "url": "https://a.test"}], "headers": {"x-api-key": "k"}}
    pooled = parse_config(
        {"pools": {"p": pool}, "routes": [route(key="header:x-api-key", pool="p")]}
    )
    assert any("pool 'p'.headers replaces" in w for w in pooled.warnings), pooled.warnings
    other = parse_config(config(route(key="header:x-tenant"), origin_headers={"X-Api-Key": "$K"}))
    assert not any(".key: counts" in w for w in other.warnings)


def test_a_query_key_name_is_written_decoded() -> None:
    for name in ("a%20b", "%61", "a+b"):
        (problem,) = problems_of(config(route(key=f"query:{name}")))
        assert "route 'r'.key" in problem and "write the parameter's name decoded" in problem
    assert parse_config(config(route(key="query:a%b"))).routes  # a literal '%', decoded
    # A cookie's name too (a probe's finding: every client shared one counter).
    (cookie,) = problems_of(config(route(key="cookie:a%20b")))
    assert "route 'r'.key" in cookie and "write the cookie's name decoded" in cookie
    assert parse_config(config(route(key="cookie:a+b"))).routes  # '+' stays '+' in a cookie


def test_a_refused_lease_ttl_or_limit_is_said_once_where_it_is_written() -> None:
    # A ttl refused is not then judged at the default ttl nobody wrote.
    (ttl,) = problems_of(config(route(limits="1/hour", leases={"ttl": "0ms"})))
    assert "leases.ttl" in ttl and "shorter than 1ms" in ttl, ttl
    # A burst the algorithm does not take is the limit's problem, not the leases'.
    (burst,) = problems_of(config(route(limits="10/minute", burst=1, leases=True)))
    assert "route 'r'.burst" in burst and "leases" not in burst, burst


def test_problems_show_the_value_written_as_toml_writes_it() -> None:
    (key,) = problems_of(config(route(key=["ip", True])))
    assert key.endswith("got true"), key
    (match,) = problems_of(config(route(match=5)))
    assert "match: must be a table like" in match and match.endswith("got 5"), match
    assert "is required" in problems_of(config(route(match=None)))[0]
    (path,) = problems_of(config(route(match={"path": 5})))
    assert path.endswith("got 5"), path
    (same,) = problems_of(config(route(limits=["5/minute", "10/minute"])))
    assert "same window (5 per minute and 10 per minute)" in same, same


def test_a_key_on_a_field_no_origin_gets_is_refused() -> None:
    for part in ("header:te", "header:Connection", "header:transfer_encoding", "header:expect"):
        (problem,) = problems_of(config(route(key=["ip", part])))
        assert "route 'r'.key" in problem and "no origin ever gets" in problem, problem
    assert parse_config(config(route(key="header:x-api-key"))).routes


def test_client_ip_header_may_not_be_a_field_the_runtime_sets() -> None:
    for name in ("CF-Connecting-IP", "cf-ipcountry"):
        (problem,) = problems_of(config(route(), client_ip_header=name))
        assert "config.client_ip_header" in problem and "runtime owns" in problem, problem


def test_names_and_patterns_say_what_is_wrong() -> None:
    (named,) = problems_of(config(route(name="-a")))
    assert "routes[0].name: must be letters" in named and "starting with a letter" in named
    assert "is required" in problems_of(config(route(name=None)))[0]
    twice = problems_of(config(route(name="a"), route(name="a", match={"path": "/b"})))
    assert any("used by an earlier route (this is routes[1])" in p for p in twice), twice
    for path in ("/x/../y", "/x/%2e/y", "/.."):
        (dots,) = problems_of(config(route(match={"path": path})))
        assert "is a dot segment" in dots and "climbs" not in dots, dots
    (rate,) = problems_of(config(route(limits="10/0s")))
    assert rate.endswith("the window must be at least 1 unit"), rate


def test_an_origin_url_a_request_could_not_have_is_refused() -> None:
    for url, expected in (
        ("https://a.test:0/b", "invalid port"),
        ("https://a.test/x/../b", "dot segment"),
        ("https://a.test/x/%2E%2e", "dot segment"),
        ("https://a.test/%zz", "invalid percent-encoding"),
    ):
        (problem,) = problems_of({"origin": url, "routes": [route()]})
        assert "config.origin" in problem and expected in problem, (url, problem)
    assert parse_config({"origin": "https://a.test:8443/api/v1/", "routes": [route()]}).routes


def test_an_environment_may_swap_the_origin_for_a_pool_and_back() -> None:
    from edge_limiter.core.config.sources import apply_environment

    pool = {"origins": [{"name": "s", "url": "https://s.test"}]}
    document = {
        "origin": "https://api.test",
        "routes": [route()],
        "env": {"staging": {"pool": "p", "pools": {"p": pool}}, "plain": {"origin": "https://x"}},
    }
    staging = parse_config(apply_environment(document, "staging", "f.toml"))
    assert staging.forward is not None and staging.forward.pool.name == "p"
    pooled = {"pool": "p", "pools": {"p": pool}, "routes": [route()], "env": document["env"]}
    plain = apply_environment(pooled, "plain", "f.toml")
    assert plain["origin"] == "https://x" and "pool" not in plain


def test_explain_takes_a_post_as_the_method_it_asks_for() -> None:
    from edge_limiter.core.explain import explain

    parsed = parse_config(
        config(
            route(name="del", match={"path": "/x", "methods": ["DELETE"]}, limits="1/minute"),
            route(name="any", match={"path": "/x"}),
        )
    )
    url = "https://api.example.com/x"
    header = explain(parsed, "POST", url, [("X-HTTP-Method-Override", "delete")])
    assert header["method"] == "DELETE" and header["sent_as"] == "POST"
    assert header["route"] == "del"
    query = explain(parsed, "POST", url + "?_method=DELETE")
    assert query["route"] == "del"
    assert explain(parsed, "POST", url)["route"] == "any"
    refused = explain(parsed, "POST", url, [("X-HTTP-Method-Override", "FOO")])
    assert refused["status"] == 400 and refused["error"].startswith("method_override:")
    passing = parse_config({**config(route(match={"path": "/x"})), "method_override": "pass"})
    assert explain(passing, "POST", url + "?_method=DELETE")["method"] == "POST"


def test_a_bucket_lease_with_most_of_its_burst_in_reserve_warns_of_the_sustained_rate() -> None:
    def warnings(ttl: str) -> list[str]:
        leased = route(limits="10/s", algorithm="gcra", leases={"ttl": ttl})
        return [w for w in parse_config(config(leased)).warnings if "in reserve" in w]

    assert "sustained rate falls" in warnings("900ms")[0]
    assert "sustained rate falls" not in warnings("500ms")[0]  # half: pass at once only


def test_a_misspelt_field_names_the_field_it_likely_means() -> None:
    (problem,) = problems_of(config(route(algoritm="gcra")))
    assert "route 'r'.algoritm: unknown field (did you mean 'algorithm'? known:" in problem
    (far,) = problems_of(config(route(xyz=1)))
    assert "did you mean" not in far and "known: name, match" in far


def test_explain_reads_a_request_without_the_fields_its_connection_names() -> None:
    # As the gateway does (a probe's finding: explain counted the key the gateway drops).
    from edge_limiter.core.explain import explain

    parsed = parse_config(config(route(key="header:x-k")))
    url = "https://api.example.com/v1/x"
    assert explain(parsed, "GET", url, [("x-k", "K1")])["key"] == "header:x-k=K1"
    named = explain(parsed, "GET", url, [("x-k", "K1"), ("Connection", "X-K")])
    assert named["key"] == "header:x-k="
