"""Keys: who a request is counted against, and bounded Durable Object names."""

from __future__ import annotations

from urllib.parse import quote, unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core import keys
from edge_limiter.core.canonical import decode_segment
from edge_limiter.core.errors import AmbiguousRequestError, KeySpecError
from edge_limiter.core.http.messages import Client, Headers, Request
from edge_limiter.core.keys import (
    KeyPart,
    KeySpec,
    aggregate_ip,
    given_key,
    object_name,
    parse_key_part,
)
from tests.examples import examples


def view(
    client_ip: str = "",
    headers: dict[str, str] | list[tuple[str, str]] | None = None,
    query: str = "",
    country: str = "",
    asn: str = "",
) -> Request:
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    return Request(
        "GET",
        "/",
        query=query,
        headers=Headers(pairs),
        client=Client(ip=client_ip, country=country, asn=asn),
    )


def spec(*parts: str) -> KeySpec:
    return KeySpec(tuple(parse_key_part(p) for p in parts))


def test_ipv6_is_aggregated_to_64_by_default() -> None:
    a = spec("ip").compute(view(client_ip="2001:db8:1:2:aaaa::1"), {})
    b = spec("ip").compute(view(client_ip="2001:db8:1:2:bbbb::9"), {})
    c = spec("ip").compute(view(client_ip="2001:db8:1:3::1"), {})
    assert a == b != c
    assert aggregate_ip("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"


def test_ipv4_is_exact_and_mapped_ipv6_counts_as_ipv4() -> None:
    assert aggregate_ip("203.0.113.7") == "203.0.113.7"
    assert aggregate_ip("::ffff:203.0.113.7") == "203.0.113.7"
    assert aggregate_ip("203.0.113.7", ipv4_prefix=24) == "203.0.113.0/24"


def test_forwarded_for_does_not_decide_identity() -> None:
    headers = {"x-forwarded-for": "1.2.3.4", "x-real-ip": "5.6.7.8"}
    a = spec("ip").compute(view(client_ip="198.51.100.1", headers=headers), {})
    b = spec("ip").compute(view(client_ip="198.51.100.1"), {})
    assert a == b


def test_every_part_kind() -> None:
    request = view(
        client_ip="198.51.100.1",
        headers={"x-api-key": "k1", "cookie": "session=s1; theme=dark"},
        query="user=u1&x=2",
        country="DE",
        asn="3320",
    )
    key = spec(
        "ip",
        "header:X-Api-Key",
        "cookie:session",
        "query:user",
        "path:tenant",
        "country",
        "asn",
        "global",
    ).compute(request, {"tenant": "acme"})
    assert key == (
        "ip=198.51.100.1|header:x-api-key=k1|cookie:session=s1|query:user=u1|"
        "path:tenant=acme|country=DE|asn=3320|global="
    )


def test_missing_values_share_one_counter_and_cannot_forge_other_parts() -> None:
    assert spec("header:x-api-key").compute(view(), {}) == "header:x-api-key="
    # A value containing the separator is escaped, so it cannot impersonate a combination.
    forged = spec("header:a", "header:b").compute(view(headers={"a": "x|header:b=y"}), {})
    honest = spec("header:a", "header:b").compute(view(headers={"a": "x", "b": "y"}), {})
    assert forged != honest


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "colour",
        "header",
        "header: ",
        "ip:x",
        5,
        "header:x api key",  # a space is no header name
        "header:caf\u00e9",
        "cookie:a;b",
        "cookie:a=b",
        "query:a&b",
        "query:a=b",
        "query:a b",
        "path:1x",
        "path:a-b",
    ],
)
def test_bad_parts(bad: object) -> None:
    with pytest.raises(KeySpecError):
        parse_key_part(bad)


def test_whitespace_around_a_header_value_is_no_part_of_the_key() -> None:
    # RFC 9110: a field value excludes it, and origins read it so; the runtime keeps
    # trailing whitespace, which must not make a counter apart from the value's own.
    key = spec("header:x-api-key")
    plain = key.compute(view(headers={"x-api-key": "K"}), {})
    for spaced in ("K ", "K\t", "K  \t", " K"):
        assert key.compute(view(headers={"x-api-key": spaced}), {}) == plain, repr(spaced)


def test_a_value_sent_twice_with_different_values_is_ambiguous() -> None:
    """The origin might read the other one: identity must not be a guess (400)."""
    with pytest.raises(AmbiguousRequestError, match="query parameter 'user'"):
        spec("query:user").compute(view(query="user=a&user=b"), {})
    with pytest.raises(AmbiguousRequestError, match="cookie 'sid'"):
        spec("cookie:sid").compute(view(headers={"cookie": "sid=a; sid=b"}), {})
    with pytest.raises(AmbiguousRequestError, match="cookie 'sid'"):
        spec("cookie:sid").compute(view(headers=[("cookie", "sid=a"), ("cookie", "sid=b")]), {})
    with pytest.raises(AmbiguousRequestError, match="header 'x-api-key'"):
        spec("header:x-api-key").compute(view(headers=[("x-api-key", "a"), ("x-api-key", "b")]), {})
    # The runtime joins a field sent twice into one value with ", " (and sends the origin
    # both lines): a comma separates values, so this is the same ambiguity.
    with pytest.raises(AmbiguousRequestError, match="header 'x-api-key' holds 2 different"):
        spec("header:x-api-key").compute(view(headers={"x-api-key": "victim, mine"}), {})
    with pytest.raises(AmbiguousRequestError, match="header 'x-tenant'"):
        spec("header:x-tenant").compute(view(headers=[("x-tenant", "a"), ("x-tenant", "b,c")]), {})
    # ... but not in a field the runtime forwards as one joined line (the origin sees the
    # value counted), whose one value may hold commas of its own: it is taken whole.
    agent = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)"
    signed = "AWS4-HMAC-SHA256 Credential=AK/20261201/us-east-1/s3/aws4_request, Signature=ab"
    chain = "203.0.113.9, 198.51.100.1"  # a proxy chain: a list by definition
    for name, value in (
        ("user-agent", agent),
        ("Authorization", signed),
        ("x-forwarded-for", chain),
    ):
        assert spec(f"header:{name}").compute(view(headers={name: value}), {}) == (
            f"header:{name.lower()}=" + quote(value, safe="")
        )
    # The same value twice is no ambiguity, joined or not; nor are empty list items.
    for joined in ("k1, k1", "k1,", "k1 ,k1,"):
        assert spec("header:x-api-key").compute(view(headers={"x-api-key": joined}), {}) == (
            "header:x-api-key=k1"
        )
    assert spec("header:x-api-key").compute(view(headers={"x-api-key": " , "}), {}) == (
        "header:x-api-key="
    )
    # ";" separates query parameters too (Rack 2 splits on it): no fresh key per request.
    assert spec("query:user").compute(view(query="user=a;x=1"), {}) == "query:user=a"
    with pytest.raises(AmbiguousRequestError, match="query parameter 'user'"):
        spec("query:user").compute(view(query="user=a;user=b"), {})
    assert spec("query:user").compute(view(query="user=a%3Bb"), {}) == "query:user=a%3Bb"
    # Percent-encoding is decoded before comparing.
    assert spec("query:user").compute(view(query="user=a&user=%61"), {}) == "query:user=a"
    assert spec("cookie:sid").compute(view(headers={"cookie": "sid=a; x=1; sid=a"}), {}) == (
        "cookie:sid=a"
    )


# Values SimpleCookie reads in full: its legal characters, or a quoted string with escapes
# (no ";": a Cookie line is split on it first, in quotes or not).
_LEGAL = "abcXYZ019!#$%&'*+-.^_`|~:"
_COOKIE_VALUES = st.one_of(
    st.text(alphabet=_LEGAL, min_size=1, max_size=20),
    st.lists(
        st.one_of(
            st.text(alphabet=_LEGAL + " ,=()", min_size=1, max_size=3),
            st.sampled_from(['\\"', "\\\\", "\\012", "\\101", "\\x"]),
        ),
        max_size=6,
    ).map(lambda parts: '"' + "".join(parts) + '"'),
)


@given(_COOKIE_VALUES)
def test_cookie_values_are_read_as_python_reads_them(value: str) -> None:
    """The gateway reads cookies without ``http.cookies`` (it costs the isolate's startup),
    and then percent-decodes them as Rack and Express do."""
    from http.cookies import SimpleCookie

    jar: SimpleCookie = SimpleCookie()
    jar.load(f"sid={value}")
    expected = unquote(jar["sid"].value, errors="surrogateescape")
    request = view(headers={"cookie": f"a=1; sid={value}; b=2"})
    if "," in value:
        # Origins that split on "," (Rack 2) read another value: refused, not guessed.
        with pytest.raises(AmbiguousRequestError, match="cookie 'sid'"):
            request.cookie("sid")
    else:
        assert request.cookie("sid") == expected


def test_a_cookie_origins_would_read_differently_is_ambiguous() -> None:
    # Two Cookie lines reach the Worker joined with ", ": Rack reads sid=K from this.
    for line in ("sid=K, x=1", "sid=K,x=1", 'sid="K", x=1'):
        with pytest.raises(AmbiguousRequestError, match="cookie 'sid'"):
            view(headers={"cookie": line}).cookie("sid")
    # A comma elsewhere in the line is no matter for this cookie.
    assert view(headers={"cookie": "sid=K; prefs=a,b"}).cookie("sid") == "K"
    assert view(headers={"cookie": "a=1, b=2; sid=K"}).cookie("sid") == "K"


def test_a_cookie_is_read_percent_decoded_as_rack_and_express_read_it() -> None:
    # Each spelling of K7 is K7 to those origins: one counter, not one per spelling.
    spellings = ("sid=K7", "sid=%4B7", "sid=%4b7", "sid=K%37", "sid=%4B%37")
    assert {view(headers={"cookie": line}).cookie("sid") for line in spellings} == {"K7"}
    # A name spelled encoded is that name: two different values for it are ambiguous.
    with pytest.raises(AmbiguousRequestError, match="cookie 'sid'"):
        view(headers={"cookie": "s%69d=K7; sid=rnd1"}).cookie("sid")
    assert view(headers={"cookie": "sid=%zz"}).cookie("sid") == "%zz"  # no escape: as sent
    # Bytes that are not UTF-8 stay apart: three values to Rack, three counters here.
    cookie = spec("cookie:sid")
    keys = {
        cookie.compute(view(headers={"cookie": f"sid={v}x1"}), {}) for v in ("%FF", "%FE", "%C0")
    }
    assert keys == {"cookie:sid=%FFx1", "cookie:sid=%FEx1", "cookie:sid=%C0x1"}


def test_a_query_or_cookie_key_counts_every_spelling_php_reads_as_its_name() -> None:
    # A probe's finding: ?api.key=K reached a PHP origin as its api_key=K while the
    # gateway counted it keyless, so each key had the keyless counter's quota as well.
    query = spec("query:api_key")
    for spelled in (
        "api_key=K",
        "api.key=K",
        "api%2Ekey=K",
        "api+key=K",
        "+api_key=K",
        "api_key[]=K",
        "api_key[0]=K",
        "api[key=K",
        "x=1;api.key=K",
        # PHP reads a name as a C string: it ends at a NUL (a later probe's finding).
        "api_key%00=K",
        "api_key%00other=K",
        "api.key%00=K",
        # Rack 2 (Rails 6, 7.0) skips the brackets a name starts with and those after it;
        # ASP.NET Core looks names up in any case (a later probe's findings).
        "[api_key]=K",
        "api_key]=K",
        "]]api_key]]=K",
        "[]api_key=K",
        "%5Bapi_key%5D=K",
        "API_KEY=K",
        "Api_Key=K",
    ):
        assert query.compute(view(query=spelled), {}) == "query:api_key=K", spelled
    for other in (
        "apikey=K",
        "api-key=K",
        "api_key[=K",
        "[api_key[x]=K",
        "api_key_=K",
        "xapi_key=K",
        "%00api_key=K",
        "api%00_key=K",
    ):
        assert query.compute(view(query=other), {}) == "query:api_key=", other
    # Both spellings with different values: an origin reads one or the other.
    with pytest.raises(AmbiguousRequestError, match="api_key"):
        view(query="api_key=K&api.key=J").query_param("api_key")
    assert view(query="api_key=K&api.key=K").query_param("api_key") == "K"
    with pytest.raises(AmbiguousRequestError, match="api_key"):
        view(query="api_key=decoy&api_key%00=K").query_param("api_key")
    for decoy in ("[api_key]", "API_KEY"):
        with pytest.raises(AmbiguousRequestError, match="api_key"):
            view(query=f"api_key=decoy&{decoy}=K").query_param("api_key")
    # A name written as an array member is matched as written only.
    member = spec("query:filter[id]")
    assert member.compute(view(query="filter[id]=7&filter[name]=x"), {}) == ("query:filter[id]=7")
    cookie = spec("cookie:session_id")
    for line in (
        "session_id=C",
        "session.id=C",
        "a=1; session%2Eid=C",
        "session_id%00=C",
        "SESSION_ID=C",
        "[session_id]=C",
    ):
        assert cookie.compute(view(headers={"cookie": line}), {}) == "cookie:session_id=C"
    with pytest.raises(AmbiguousRequestError, match="session_id"):
        view(headers={"cookie": "session_id=C; session.id=D"}).cookie("session_id")
    with pytest.raises(AmbiguousRequestError, match="session_id"):
        view(headers={"cookie": "session_id%00=C; session_id=D"}).cookie("session_id")
    # Another site of the domain may well set "SESSION_ID" beside this one's
    # "session_id": the name in its own case wins then (no 400 for such a browser).
    both = view(headers={"cookie": "SESSION_ID=other; session_id=C; Session_Id=x"})
    assert both.cookie("session_id") == "C"


def test_an_authorization_key_counts_every_spelling_of_the_same_credentials() -> None:
    # A probe's finding: "bearer T1" and "Bearer  T1" were fresh counters beside
    # "Bearer T1", though the scheme is case-insensitive (RFC 9110 section 11.1) and
    # origins split the field on any whitespace.
    auth = spec("header:authorization")
    for line in ("Bearer T1", "bearer T1", "BEARER T1", "Bearer  T1", "Bearer\tT1", "bEaReR \t T1"):
        assert auth.compute(view(headers={"authorization": line}), {}) == (
            "header:authorization=Bearer%20T1"
        ), line
    # The credentials keep their case; a scheme outside the table is lower-cased; a
    # value that is not a scheme and credentials is taken as sent.
    assert auth.compute(view(headers={"authorization": "Bearer t1"}), {}).endswith("=Bearer%20t1")
    assert auth.compute(view(headers={"authorization": "MyScheme K"}), {}).endswith("=myscheme%20K")
    assert auth.compute(view(headers={"authorization": "SK_live_AbC"}), {}).endswith("=SK_live_AbC")
    # So does a proxy's field; other headers are taken as sent.
    proxy = spec("header:proxy-authorization")
    assert proxy.compute(view(headers={"proxy-authorization": "basic  dXNlcg=="}), {}) == (
        "header:proxy-authorization=Basic%20dXNlcg%3D%3D"
    )
    assert spec("header:x-key").compute(view(headers={"x-key": "bearer  T1"}), {}) == (
        "header:x-key=bearer%20%20T1"
    )
    # Basic credentials: decoders read many spellings as the same user:password (a
    # probe's finding: each was a counter of its own).
    canonical = "header:authorization=Basic%20dXNlcjpwYXM%3D"
    for line in (
        "Basic dXNlcjpwYXM=",
        "basic dXNlcjpwYXN=",  # bits past the last byte
        "Basic dXNl.cjpwYXM=",  # a character outside the alphabet
        "Basic dXNlcjpwYXM",  # no padding
        "Basic dXNlcjpwYXM==",
        "Basic  dXNl cjpw YXM=",
        # Anything after the padding is ignored by the decoders (a later probe's finding).
        "Basic dXNlcjpwYXM=AAAA",
        "Basic dXNlcjpwYXM=QUJD",
        "Basic dXNlcjpwYXM=x",
        "Basic dXNlcjpwYXM= AAAA",
        "Basic dXNlcjpwYXM=, Bearer x",
        "Basic dXNl-cjpwYXM=",  # "-" outside the standard alphabet: skipped
    ):
        assert auth.compute(view(headers={"authorization": line}), {}) == canonical, line
    assert auth.compute(view(headers={"authorization": "Basic dXNlcjpwYXN3"}), {}) != canonical
    assert auth.compute(view(headers={"authorization": "Basic a"}), {}).endswith("=Basic%20a")
    assert given_key(auth, "Basic dXNlcjpwYXN") == canonical
    # An operator's key names the same counter in any of those spellings.
    assert given_key(auth, "bearer T1") == "header:authorization=Bearer%20T1"
    assert given_key(auth, "header:authorization=BEARER%20%20T1") == (
        "header:authorization=Bearer%20T1"
    )


def test_a_country_key_is_the_code_as_request_cf_writes_it() -> None:
    # As explain writes it: lower case (a local MF-CF-Blob may say so) is the same country.
    country = spec("country")
    assert country.compute(view(country="de"), {}) == country.compute(view(country="DE"), {})
    assert country.compute(view(country="de"), {}) == "country=DE"


def test_a_path_key_of_bytes_that_are_not_utf8_is_a_key_not_an_error() -> None:
    spec = KeySpec((KeyPart("path", "tenant"),))
    for segment in ("%FF", "%C0%AE", "%ED%A0%80"):
        key = spec.compute(view(), {"tenant": decode_segment(segment)})
        assert key == f"path:tenant={segment}" and given_key(spec, key) == key


def test_cookie_values_python_rejects_are_taken_as_sent() -> None:
    assert view(headers={"cookie": "sid=a b; c=d"}).cookie("sid") == "a b"
    assert view(headers={"cookie": 'sid="x'}).cookie("sid") == '"x'


def test_parse_parts() -> None:
    assert parse_key_part("Header:X-Api-Key") == KeyPart("header", "x-api-key")
    assert parse_key_part("cookie:Session") == KeyPart("cookie", "Session")


def test_object_names_are_bounded_and_distinct_across_routes() -> None:
    assert object_name("login", "ip=1.2.3.4") == "login:ip=1.2.3.4"
    long_key = "header:x=" + "a" * 500
    name = object_name("login", long_key)
    assert name.startswith("login#") and len(name) == len("login#") + 64


@given(st.text(min_size=0, max_size=300), st.text(min_size=0, max_size=300))
def test_object_names_never_collide(a: str, b: str) -> None:
    if a != b:
        assert object_name("r", a) != object_name("r", b)
    assert len(object_name("r", a)) <= len("r#") + 128 + 64


def test_a_key_given_by_an_operator_is_put_in_the_form_requests_get() -> None:
    one = KeySpec((KeyPart("header", "x-api-key"),))
    assert given_key(one, "premium_1") == "header:x-api-key=premium_1"
    assert given_key(one, "header:x-api-key=premium_1") == "header:x-api-key=premium_1"
    assert given_key(one, "a b=") == "header:x-api-key=a%20b%3D"  # encoded as computed
    ip = KeySpec((KeyPart("ip"),))
    v6 = "ip=" + quote("2001:db8::/64", safe="")
    assert given_key(ip, "2001:db8::1") == given_key(ip, "ip=2001:db8::7") == v6
    two = KeySpec((KeyPart("path", "tenant"), KeyPart("ip")))
    full = "path:tenant=acme|ip=203.0.113.9"
    assert given_key(two, full) == full
    with pytest.raises(KeySpecError, match=r"path:tenant=VALUE\|ip=VALUE"):
        given_key(two, "acme")


def test_a_given_key_no_request_can_have_is_refused() -> None:
    everybody = KeySpec((KeyPart("global"),))
    counted = everybody.compute(Request("GET", "/", "", "a.test"), {})
    assert counted == "global="
    assert given_key(everybody, "global") == given_key(everybody, "global=") == counted
    for wrong in ("x", "global=x"):
        with pytest.raises(KeySpecError, match="a global key has no value"):
            given_key(everybody, wrong)
    ip = KeySpec((KeyPart("ip"),), ipv4_prefix=24)
    assert given_key(ip, "203.0.113.9") == given_key(ip, "ip=203.0.113.0%2F24")
    assert given_key(ip, "ip=") == "ip="  # requests without an address
    for wrong in ("notakey", "999.1.1.1", "ip=1.2.3", "203.0.113.0/25", "2001:db8::/48"):
        with pytest.raises(KeySpecError):
            given_key(ip, wrong)


@given(st.text(max_size=30), st.sampled_from(["1.2.3.4", "2001:db8::1", "::ffff:1.2.3.4", ""]))
def test_the_key_a_request_gets_is_its_own_given_form(value: str, ip: str) -> None:
    spec = KeySpec((KeyPart("header", "x-api-key"), KeyPart("ip")))
    req = Request("GET", "/", "", "a.test", "https", Headers([("x-api-key", value)]), Client(ip=ip))
    try:
        key = spec.compute(req, {})
    except AmbiguousRequestError:
        return
    assert given_key(spec, key) == key


def test_a_given_header_value_no_request_can_send_is_refused() -> None:
    # A probe's finding: an override for "a b,c" was stored, though every request sending
    # it is refused as ambiguous (a comma separates the header's values).
    one = KeySpec((KeyPart("header", "x-k"),))
    for wrong in ("header:x-k=a b,c", "a,b", " padded", "padded\t"):
        with pytest.raises(KeySpecError):
            given_key(one, wrong)
    assert given_key(one, "a b") == "header:x-k=a%20b"
    # A field the runtime forwards joined is taken whole, commas and all.
    agent = KeySpec((KeyPart("header", "user-agent"),))
    assert given_key(agent, "Mozilla/5.0 (X11, Linux)").startswith("header:user-agent=")
    request = Request(
        "GET", "/", "", "a.test", headers=Headers([("user-agent", "Mozilla/5.0 (X11, Linux)")])
    )
    assert agent.compute(request, {}) == given_key(agent, "Mozilla/5.0 (X11, Linux)")


OCTETS = st.one_of(
    st.integers(0, 300).map(str),
    st.sampled_from(["00", "01", "007", "1000", "", " 1", "1 ", "+1", "\u0661", "0x1"]),
)


@settings(max_examples=examples(300))
@given(st.one_of(st.lists(OCTETS, min_size=3, max_size=5).map(".".join), st.text(max_size=20)))
def test_an_address_counted_whole_is_what_parsing_it_gives(text: str) -> None:
    # The dotted-quad shortcut (no parsing) agrees with parsing, for any text.
    assert aggregate_ip(text) == keys._aggregated(text, 32, 64)
    assert aggregate_ip(text, 24) == keys._aggregated(text, 24, 64)
