"""Method overrides: what a POST asks to be taken as, and what each mode makes of it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_limiter.core.http.method_override import (
    MethodOverrideError,
    asked_methods,
    is_form,
    is_json,
    overridden_method,
    without_override_param,
)


def test_every_place_a_framework_reads_an_override_from() -> None:
    assert asked_methods([("x-http-method-override", "delete")], "", None) == {
        "DELETE": "the x-http-method-override field"
    }
    assert asked_methods([("x-http-method", "PUT")], "", None) == {"PUT": "the x-http-method field"}
    assert asked_methods([], "a=1&_method=patch", None) == {"PATCH": "the _method query parameter"}
    assert asked_methods([], "", b"name=x&_method=DELETE") == {"DELETE": "the _method form field"}
    # A field sent twice reaches the Worker joined with ", ".
    assert set(asked_methods([("x-method-override", "PUT, DELETE")], "", None)) == {"PUT", "DELETE"}
    # Nothing asked: no field, an empty one, a parameter of another name.
    assert (
        asked_methods([("x-http-method-override", " ")], "method=PUT&x_method=1", b"a=_method")
        == {}
    )


def test_is_form() -> None:
    assert is_form("application/x-www-form-urlencoded")
    assert is_form("Application/X-WWW-Form-URLEncoded; charset=utf-8")
    assert not is_form("multipart/form-data; boundary=x")
    assert not is_form("application/json")
    assert is_form(None) and is_form("")  # Rack reads a POST body of no type as a form
    # A field sent twice, joined: each type is a candidate.
    assert is_form("application/x-www-form-urlencoded, text/plain")
    assert is_form("text/plain, application/x-www-form-urlencoded; charset=utf-8")
    assert not is_form("text/plain, multipart/form-data")
    assert is_json("text/plain, application/vnd.api+json")


def test_a_method_asked_for_in_any_spelling_origins_decode_is_found() -> None:
    # Rack, PHP and Express's qs decode parameter names; Rack 2 splits on ';'; Laravel
    # reads a JSON body's _method.
    for query in ("%5Fmethod=DELETE", "_metho%64=DELETE", "a=1;_method=DELETE"):
        assert asked_methods([], query, None) == {"DELETE": "the _method query parameter"}
    assert asked_methods([], "", b"%5Fmethod=DELETE") == {"DELETE": "the _method form field"}
    json_asks = asked_methods([], "", None, b'{"_method": "DELETE"}')
    assert json_asks == {"DELETE": "the _method member of the JSON body"}
    assert asked_methods([], "", None, b'{"\\u005fmethod": "put"}') == {
        "PUT": "the _method member of the JSON body"
    }
    assert asked_methods([], "", None, b'["_method"]') == {}
    assert asked_methods([], "", None, b"not json _method") == {}


def test_the_spellings_php_reads_as_method_are_found_and_dropped() -> None:
    # A probe's finding: PHP (so Laravel and Symfony) registers ".method", " _method" and
    # "_method[]" as its _method, so a DELETE limited to 2 a minute went through as POSTs.
    for name in (".method", "%2Emethod", "+_method", "%20.method", "_method[]", " .method"):
        assert asked_methods([], f"a=1&{name}=DELETE", None) == {
            "DELETE": "the _method query parameter"
        }, name
        assert asked_methods([], "", f"{name}=DELETE".encode()) == {
            "DELETE": "the _method form field"
        }, name
        assert without_override_param(f"a=1&{name}=DELETE&b=2") == "a=1&b=2", name
    # Names PHP reads otherwise: " method" is its "method"; "[method" it drops.
    for name in ("+method", "[method", "x.method", "_method_", "_method[x"):
        assert asked_methods([], f"{name}=DELETE", f"{name}=PUT".encode()) == {}, name
        assert without_override_param(f"{name}=DELETE") == f"{name}=DELETE", name
    # Two spellings asking for two methods are refused like any two.
    assert set(asked_methods([], "_method=PUT&.method=DELETE", None)) == {"PUT", "DELETE"}


def test_the_spellings_rack_2_and_asp_net_core_read_as_method_are_found() -> None:
    # A probe's findings: Rack 2 (Rails 6, 7.0) reads "[_method]", "_method]" and
    # "]_method" as _method, ASP.NET Core reads "_METHOD" as it (names in any case).
    for name in ("[_method]", "_method]", "]_method", "%5B_method%5D", "_METHOD", "_Method"):
        assert asked_methods([], "", f"{name}=DELETE".encode()) == {
            "DELETE": "the _method form field"
        }, name
        assert without_override_param(f"a=1&{name}=DELETE") == "a=1", name


def test_a_json_body_is_read_for_its_method_as_laravel_reads_one() -> None:
    # A probe's findings: Laravel takes any Content-Type holding "/json" or "+json" as
    # JSON, and reads an integer of any length (PHP: a float) where CPython refuses one of
    # more than 4,300 digits: both were POSTs here and DELETEs there.
    for content_type in (
        "text/json",
        "application/jsonx",
        "application/json-seq",
        "text/plain; x=/json",
    ):
        assert is_json(content_type), content_type
    assert not is_json("text/plain") and not is_json("application/xml") and not is_json(None)
    huge = b'{"_method":"DELETE","x":1' + b"0" * 5_000 + b"}"
    assert asked_methods([], "", None, huge) == {"DELETE": "the _method member of the JSON body"}


@pytest.mark.parametrize("mode", ["apply", "refuse"])
def test_a_json_body_too_deep_to_read_is_refused(mode: str) -> None:
    # Parsing it would have killed the isolate on Pyodide (a probe's finding: 5,000
    # nested arrays stopped every request after it on local workerd); what it asks for
    # cannot be known, so the request is refused, never taken as the POST it says.
    deep = b'{"_method":"DELETE","x":' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    asked = asked_methods([], "", None, deep)
    with pytest.raises(MethodOverrideError, match="nested deeper than 512 levels"):
        overridden_method(mode, asked, True)
    assert overridden_method("pass", asked, True) is None


@pytest.mark.parametrize("mode", ["apply", "refuse"])
def test_nothing_asked_or_post_itself_keeps_the_post(mode: str) -> None:
    assert overridden_method(mode, {}, True) is None
    assert overridden_method(mode, {"POST": "the x-http-method field"}, True) is None


def test_apply_takes_the_method_asked_for() -> None:
    assert overridden_method("apply", {"DELETE": "the x-http-method field"}, True) == "DELETE"
    assert overridden_method("apply", {"GET": "the _method query parameter"}, False) == "GET"


@pytest.mark.parametrize(
    ("asked", "has_body", "says"),
    [
        ({"PUT": "a", "DELETE": "b"}, False, "several methods: DELETE (b), PUT (a)"),
        ({"GET": "the _method form field"}, True, "without a body"),
        ({"HEAD": "the x-http-method field"}, True, "without a body"),
        ({"DE LETE": "the x-http-method field"}, False, "not a method"),
    ],
)
def test_apply_refuses_what_cannot_be_sent(
    asked: dict[str, str], has_body: bool, says: str
) -> None:
    with pytest.raises(MethodOverrideError, match=re.escape(says)):
        overridden_method("apply", asked, has_body)


def test_refuse_says_what_to_send_instead() -> None:
    with pytest.raises(MethodOverrideError, match=r"method_override = 'refuse'.*Send a DELETE"):
        overridden_method("refuse", {"DELETE": "the x-http-method-override field"}, False)


@given(
    st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=5), max_size=3), st.booleans()
)
def test_pass_never_changes_or_refuses_anything(asked: dict[str, str], has_body: bool) -> None:
    assert overridden_method("pass", asked, has_body) is None


@pytest.mark.parametrize("wanted", ["FOO", "LINK", "PROPFIND"])
def test_an_override_asking_for_a_method_the_platform_cannot_send_is_refused(wanted: str) -> None:
    # The platform's fetch refuses method names it does not know: forwarded, every attempt
    # would fail as if the origin were down (and open its breaker for everyone).
    with pytest.raises(MethodOverrideError, match="an override may ask for"):
        overridden_method("apply", {wanted: "the _method form field"}, has_body=False)


def test_an_applied_query_override_leaves_the_query_as_the_uri_it_acts_on() -> None:
    # A soak's finding: POST ?_method=DELETE reached the origin as a DELETE of
    # /x?_method=DELETE, and the cached GET of /x was never invalidated.
    assert without_override_param("_method=DELETE") == ""
    assert without_override_param("a=1&_method=DELETE&b=2") == "a=1&b=2"
    assert without_override_param("%5Fmethod=PUT;a=%20x") == "a=%20x"
    assert without_override_param("a=1;_method=PUT&b") == "a=1&b"
    assert without_override_param("a=1&b=2") == "a=1&b=2"
    assert without_override_param("x_method=1&_methods=2") == "x_method=1&_methods=2"
