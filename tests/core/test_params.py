"""Parameter names as origins read them, found without decoding every other parameter."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_limiter.core.http.messages import AmbiguousRequestError
from edge_limiter.core.http.method_override import (
    MethodOverrideError,
    asked_methods,
    overridden_method,
)
from edge_limiter.core.http.params import MAX_CANDIDATES, decoded_pieces, same_param

_NAMES = st.sampled_from(
    [
        "api_key", "API_KEY", "api.key", "api%5Fkey", "%61pi_key", "api+key", "+api_key",
        "[api_key]", "api_key]", "api_key[]", "api_key%00x", "api[key", "apikey", "xapi_key",
        "_method", "%5Fmethod", ".method", "[_method]", "_METHOD", "_metho%64", "method",
        "%", "%%", "=", "", "a", "%E2%84%AA", "api_%E2%84%AAey",
    ]
)  # fmt: skip
_VALUES = st.sampled_from(["", "K", "J", "%4B", "a+b", "%", "=x", "_method", "api_key"])
_SEPARATORS = st.sampled_from(["&", ";", "&&"])


@st.composite
def queries(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(st.tuples(_NAMES, st.booleans(), _VALUES, _SEPARATORS), max_size=12))
    return "".join(
        name + ("=" + value if has_value else "") + sep for name, has_value, value, sep in pieces
    )


@given(queries(), st.sampled_from(["api_key", "_method"]))
def test_only_the_pieces_spelled_like_the_name_are_decoded_and_none_is_missed(
    query: str, wanted: str
) -> None:
    # The reference: every parameter parsed and decoded, as the gateway did before (a
    # 1 MiB form of "%&" then took seconds before any limit applied).
    everything = parse_qsl(query.replace(";", "&"), keep_blank_values=True)
    expected = [(name, value) for name, value in everything if same_param(name, wanted)]
    assert decoded_pieces(query, wanted, "&;") == expected


def test_too_many_parameters_spelled_like_the_name_are_refused_not_decoded() -> None:
    many = "&".join(f"_method{n}=x" for n in range(MAX_CANDIDATES + 1))
    asked = asked_methods([], many, None)
    with pytest.raises(MethodOverrideError, match="query has more than 1000 parameters"):
        overridden_method("apply", asked, False)
    assert overridden_method("pass", asked, False) is None
    # Any number of other parameters is read past at once.
    assert asked_methods([], "", ("%&" * 500_000 + "_method=PUT").encode()) == {
        "PUT": "the _method form field"
    }


def test_a_key_spelled_too_many_times_is_ambiguous() -> None:
    from edge_limiter.core.http.messages import Headers, Request

    request = Request("GET", "/", "&".join(["api_key=K"] * (MAX_CANDIDATES + 1)))
    with pytest.raises(
        AmbiguousRequestError,
        match=r"^the query has more than 1000 parameters spelled like 'api_key'$",
    ):
        request.query_param("api_key")
    cookies = Request("GET", "/", headers=Headers([("cookie", "; ".join(["sid=K"] * 1_001))]))
    with pytest.raises(
        AmbiguousRequestError,
        match=r"^the cookies hold more than 1000 parameters spelled like 'sid'$",
    ):
        cookies.cookie("sid")
