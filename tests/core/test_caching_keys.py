"""Cache keys: canonical queries, scope, Vary variants, hashing, and injectivity."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.caching.keys import base_key, method_class, normalize_vary, variant_key
from edge_limiter.core.caching.query import canonical_query, normalize_part, query_params
from edge_limiter.core.caching.settings import CacheSettings
from tests.examples import examples

from .query_readers import READERS

PUBLIC = CacheSettings(ttl_ms=60_000)
KEYED = CacheSettings(ttl_ms=60_000, scope="key")
PROPERTY = settings(max_examples=examples(200), deadline=None)
# What a KV key built here may contain: ASCII, no spaces or controls.
KEY_CHARS = re.compile(r"^[A-Za-z0-9/:@!$'()*+,;=&%|#._~-]+$")


def key(
    cache: CacheSettings = PUBLIC,
    *,
    route: str = "catalog",
    method: str = "GET",
    host: str = "api.example.com",
    path: str = "/v1/items",
    query: str = "",
    scope_key: str | None = None,
) -> str:
    return base_key(
        cache,
        route=route,
        method=method,
        host=host,
        path=path,
        query=query,
        scope_key=scope_key,
    )


# --- queries -----------------------------------------------------------------------------


def test_parameters_keep_the_order_they_were_sent_in() -> None:
    assert canonical_query("b=2&a=2&a=1&c") == "b=2&a=2&a=1&c"
    assert canonical_query("a=1&a=1") == "a=1&a=1"
    # An origin taking the last (or first) value answers these two differently.
    assert canonical_query("a=1&a=2") != canonical_query("a=2&a=1")
    # Names in another case too: an origin reading names in any case takes the first.
    assert canonical_query("id=1&ID=2") != canonical_query("ID=2&id=1")
    # And names that differ: PHP reads a.b as a_b (the last wins), numbers a[] after the
    # highest a[N] so far; Rack groups f[][k] and f[][v] into hashes by their order.
    for one, other in (
        ("a_b=2&a.b=1", "a.b=1&a_b=2"),
        ("a[5]=x&a[]=y", "a[]=y&a[5]=x"),
        (
            "f[][k]=color&f[][v]=red&f[][k]=size&f[][v]=L",
            "f[][k]=color&f[][k]=size&f[][v]=red&f[][v]=L",
        ),
        ("B=1&a=2", "a=2&B=1"),
    ):
        assert canonical_query(one) != canonical_query(other)


def test_absent_and_blank_values_stay_apart() -> None:
    assert canonical_query("a") == "a"
    assert canonical_query("a=") == "a="
    assert canonical_query("a=&a") == "a=&a"
    assert canonical_query("a=&a") != canonical_query("a&a=")
    assert canonical_query("=x") == "=x"


def test_empty_parameters_are_dropped() -> None:
    assert canonical_query("&&a=1&&") == "a=1"
    assert canonical_query("") == ""


def test_escapes_are_normalised_only_where_equivalent() -> None:
    assert canonical_query("q=%7e%41") == canonical_query("q=~A") == "q=~A"
    assert canonical_query("q=%2f") == "q=%2F"
    assert canonical_query("q=a b") == canonical_query("q=a%20b") == "q=a%20b"
    assert canonical_query("q=é") == canonical_query("q=%C3%A9")
    # An origin may read these differently, so they stay apart.
    distinct = ["q=a+b", "q=a%2Bb", "q=a%20b", "q=a=b", "q=a%3Db", "q='", "q=%27"]
    assert len({canonical_query(text) for text in distinct}) == len(distinct)


def test_malformed_escapes_are_kept_as_sent_and_never_merged() -> None:
    assert normalize_part("%zz") == "%zz"
    assert normalize_part("%4") == "%4"
    assert canonical_query("q=%4g") != canonical_query("q=%4%67")
    assert canonical_query("q=%zz") != canonical_query("q=%25zz")


def test_a_parameter_holding_a_semicolon_is_never_ignored() -> None:
    # Rack 2 (Rails) reads "utm=1;x=2" as utm and x; other servers as utm="1;x=2". Kept
    # whole, ?utm=1;x=2 is neither the bare URL's entry nor ?x=2's, under either reading.
    ignore = ("utm",)
    spelled = ("utm=1;x=2", "utm=9;x=3", "", "x=2", "utm=9;x=2")
    keys = [canonical_query(q, ignore) for q in spelled]
    assert len(set(keys)) == len(keys)
    assert canonical_query("utm=1&x=2", ignore) == "x=2"  # the plain case still ignores
    assert canonical_query("x=2;utm=1") == "x=2;utm=1"  # nothing ignored: as before


def test_ignored_parameters_are_removed_in_normal_form() -> None:
    ignore = ("utm_source", "fbclid")
    assert canonical_query("utm_source=x&b=1&utm%5Fsource=y&fbclid&a=2", ignore) == "b=1&a=2"
    assert canonical_query("a=1&b=2", ("*",)) == ""


def test_query_params_keep_order_and_absence() -> None:
    assert query_params("b=1&a&c=") == [("b", "1"), ("a", None), ("c", "")]


UNRESERVED = "AZaz09-._~"
LOGICAL_CHARS = UNRESERVED + " +&=%#/?'é|\x00"


def render_char(char: str, style: int) -> str:
    """One logical character as a client may send it; every choice means the same."""
    escaped = "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))
    if style & 2:
        escaped = escaped.lower()
    if char in UNRESERVED or char in " é":
        return char if style & 1 else escaped
    return escaped


Param = tuple[str, str | None]
params_strategy = st.lists(
    st.tuples(
        st.text(LOGICAL_CHARS, min_size=1, max_size=4),
        st.one_of(st.none(), st.text(LOGICAL_CHARS, max_size=4)),
    ),
    max_size=5,
)


def render(params: list[Param], styles: list[int], order: list[int]) -> str:
    def enc(text: str, offset: int) -> str:
        return "".join(
            render_char(char, styles[(offset + i) % len(styles)]) for i, char in enumerate(text)
        )

    items = []
    for index in order:
        name, value = params[index]
        items.append(enc(name, index) if value is None else f"{enc(name, index)}={enc(value, 7)}")
    return "&".join(items)


@st.composite
def renderings(draw: st.DrawFn, params: list[Param]) -> str:
    """``params`` in their order, with any escapes."""
    styles = draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
    return render(params, styles, list(range(len(params))))


@PROPERTY
@given(st.data(), params_strategy, params_strategy)
def test_canonical_query_is_equal_exactly_for_the_same_parameters_in_order(
    data: st.DataObject, first: list[Param], second: list[Param]
) -> None:
    one = data.draw(renderings(first))
    other = data.draw(renderings(second))
    again = data.draw(renderings(first))
    assert canonical_query(one) == canonical_query(again)
    assert (canonical_query(one) == canonical_query(other)) == (first == second)


@PROPERTY
@given(st.data(), params_strategy, st.lists(st.text(LOGICAL_CHARS, min_size=1, max_size=3)))
def test_ignoring_is_the_same_as_leaving_out(
    data: st.DataObject, params: list[Param], ignored: list[str]
) -> None:
    def encoded_name(name: str) -> str:
        return "".join(render_char(char, 0) for char in name)

    kept = [param for param in params if param[0] not in ignored]
    full = data.draw(renderings(params))
    assert canonical_query(full, [encoded_name(n) for n in ignored]) == canonical_query(
        render(kept, [0], list(range(len(kept))))
    )


# What frameworks treat specially in a query: separators, brackets, PHP's mangled
# characters, plus and its escapes, NUL, digits for indices, a malformed escape.
FRAMEWORK_CHARS = "ab_.[] +;=%0259"
raw_queries = st.lists(
    st.text(FRAMEWORK_CHARS + "&", max_size=12).map(
        lambda text: text.replace("%", "%" if len(text) % 3 else "%2")
    ),
    max_size=5,
).map("&".join)


@PROPERTY
@given(
    st.data(),
    st.lists(
        st.tuples(
            st.text(FRAMEWORK_CHARS, min_size=1, max_size=6),
            st.one_of(st.none(), st.text(FRAMEWORK_CHARS, max_size=4)),
        ),
        max_size=5,
    ),
)
def test_every_framework_reads_the_same_parameters_from_queries_sharing_a_key(
    data: st.DataObject, params: list[Param]
) -> None:
    """Two spellings of one query share a canonical text only if PHP, Rack, qs (Express),
    Django, Starlette, Spring, ASP.NET Core and Go read the same from both: a canonical
    query reads as the query it came from, in every one of them, and so do reorderings
    that the key keeps apart (checked both ways)."""
    first = data.draw(renderings(params))
    order = data.draw(st.permutations(range(len(params))))
    second = render(params, data.draw(st.lists(st.integers(0, 3), min_size=1)), order)
    for name, read in READERS.items():
        assert read(canonical_query(first)) == read(first), name
        if canonical_query(first) == canonical_query(second):
            assert read(first) == read(second), name


@PROPERTY
@given(raw_queries)
def test_a_canonical_query_reads_as_the_query_it_came_from(query: str) -> None:
    for name, read in READERS.items():
        assert read(canonical_query(query)) == read(query), (name, query)


# --- base keys ---------------------------------------------------------------------------


def test_a_readable_key() -> None:
    assert (
        key(query="sort=name&page=2")
        == "c2|catalog|GET|api.example.com|/v1/items|sort=name&page=2|p"
    )


def test_head_shares_the_get_key_and_other_methods_are_refused() -> None:
    assert key(method="HEAD") == key(method="GET") == key(method="get")
    assert method_class("head") == "GET"
    with pytest.raises(ValueError, match="only GET and HEAD"):
        key(method="POST")


def test_ignored_query_parameters_do_not_split_entries() -> None:
    cache = CacheSettings(ttl_ms=60_000, ignore_query=("utm_source",))
    assert key(cache, query="a=1&utm_source=x") == key(cache, query="utm_source=y&a=1")
    everything = CacheSettings(ttl_ms=60_000, ignore_query=("*",))
    assert key(everything, query="a=1") == key(everything, query="")


def test_scope_key_separates_callers_and_is_not_written_in_clear() -> None:
    first = key(KEYED, scope_key="header:x-api-key=secret-1")
    second = key(KEYED, scope_key="header:x-api-key=secret-2")
    assert first != second
    assert "secret" not in first
    assert key(KEYED, scope_key="") != key(PUBLIC)
    # A public route ignores the caller's key.
    assert key(PUBLIC, scope_key="a") == key(PUBLIC, scope_key="b") == key(PUBLIC)


def test_keyed_scope_needs_the_callers_key() -> None:
    with pytest.raises(ValueError, match="scope 'key'"):
        key(KEYED)


def test_separators_inside_parts_cannot_shift_part_boundaries() -> None:
    assert key(route="a|b", host="c") != key(route="a", host="b|c")
    assert key(host="h|/p", path="") != key(host="h", path="|/p")
    assert key(path="/a|b=1", query="") != key(path="/a", query="b=1")
    assert key(host="a|b", path="/c") != key(host="a", path="b|/c")


def test_long_keys_are_hashed_with_a_readable_prefix() -> None:
    long_path = "/v1/" + "x" * 600
    hashed = key(path=long_path)
    assert len(hashed.encode()) <= 512
    assert hashed.startswith("c2#catalog|api.example.com|/v1/xxx")
    assert re.fullmatch(r"c2#[^#]+#[0-9a-f]{64}", hashed)
    assert hashed != key(path=long_path + "x")


def test_non_ascii_and_control_characters_are_escaped() -> None:
    made = key(host="bücher.example", path="/ä ö\x00\n")
    assert made.isascii() and KEY_CHARS.match(made)


# --- vary --------------------------------------------------------------------------------


def test_vary_names_normalise() -> None:
    assert normalize_vary([" Accept ", "x-tenant", "ACCEPT", ""]) == ("accept", "x-tenant")


def test_accept_encoding_never_picks_a_variant() -> None:
    # The runtime asks every origin with its own Accept-Encoding and encodes for each
    # client itself: the client's field changes nothing in the answer.
    assert normalize_vary(["Accept-Encoding", "accept"]) == ("accept",)
    assert normalize_vary(["Accept-Encoding"]) == ()


def test_variant_keys_follow_the_named_fields_only() -> None:
    base = key()
    english = variant_key(base, ["Accept-Language"], {"accept-language": "en", "x": "1"})
    assert english.startswith(base + "|v")
    assert english == variant_key(base, ["accept-language"], {"Accept-Language": "  en "})
    assert english == variant_key(base, ["accept-language"], {"accept-language": "en", "x": "2"})
    assert english != variant_key(base, ["accept-language"], {"accept-language": "de"})


def test_absent_field_differs_from_empty() -> None:
    base = key()
    assert variant_key(base, ["accept"], {}) != variant_key(base, ["accept"], {"accept": ""})


def test_field_values_never_appear_in_the_key() -> None:
    made = variant_key(key(), ["authorization"], {"authorization": "Bearer secret"})
    assert "secret" not in made and "Bearer" not in made


def test_variant_of_a_long_base_key_stays_within_kv_limits() -> None:
    near = key(path="/" + "p" * 440)
    assert not near.startswith("c2#")
    variant = variant_key(near, ["accept"], {"accept": "a"})
    assert len(variant.encode()) <= 512 and variant.startswith("c2#catalog|api.example.com|/ppp")
    hashed = key(path="/" + "p" * 600)
    assert len(variant_key(hashed, ["accept"], {}).encode()) <= 512


# --- injectivity -------------------------------------------------------------------------

TRICKY = "ab|#%=&/? +é\x00"
part = st.one_of(
    st.text(TRICKY, max_size=5),
    st.builds(
        lambda text, times: text * times,
        st.text(TRICKY, min_size=1, max_size=3),
        st.integers(50, 300),
    ),
)
KeyInput = tuple[str, str, str, str, str | None]
key_inputs = st.tuples(
    st.text(TRICKY, max_size=4),  # route
    part,  # host
    part,  # path
    st.text(TRICKY, max_size=6),  # query
    st.one_of(st.none(), st.text(TRICKY, max_size=4)),  # scope key (None: public)
)


def make_key(inputs: KeyInput) -> str:
    route, host, path, query, scope_key = inputs
    cache = PUBLIC if scope_key is None else KEYED
    return key(cache, route=route, host=host, path=path, query=query, scope_key=scope_key)


def identity(inputs: KeyInput) -> tuple[object, ...]:
    """What a key must tell apart: the query only up to canonical form."""
    route, host, path, query, scope_key = inputs
    return (route, host, path, canonical_query(query), scope_key)


@PROPERTY
@given(st.lists(key_inputs, min_size=2, max_size=8))
def test_base_keys_are_injective(inputs: list[KeyInput]) -> None:
    keys: dict[tuple[object, ...], set[str]] = {}
    for item in inputs:
        made = make_key(item)
        assert len(made.encode("utf-8")) <= 512
        assert KEY_CHARS.match(made), made
        keys.setdefault(identity(item), set()).add(made)
    assert all(len(found) == 1 for found in keys.values())
    all_keys = [next(iter(found)) for found in keys.values()]
    assert len(set(all_keys)) == len(all_keys)


@PROPERTY
@given(
    st.lists(key_inputs, min_size=1, max_size=3),
    st.lists(st.text("aB-", min_size=1, max_size=3), max_size=3),
    st.lists(
        st.dictionaries(st.sampled_from(["a", "b", "ab", "B-"]), st.text(TRICKY, max_size=3)),
        max_size=4,
    ),
)
def test_variant_keys_are_injective_and_never_equal_a_base_key(
    inputs: list[KeyInput], names: list[str], requests: list[dict[str, str]]
) -> None:
    bases = {make_key(item) for item in inputs}
    seen: dict[str, tuple[object, ...]] = {}
    normalized = normalize_vary(names)
    for base in bases:
        for headers in requests:
            lowered = {n.lower(): v.strip(" \t") for n, v in headers.items()}
            values = tuple(lowered.get(name) for name in normalized)
            made = variant_key(base, names, headers)
            assert len(made.encode("utf-8")) <= 512
            assert made not in bases
            identity_of = (base, values)
            assert seen.setdefault(made, identity_of) == identity_of


@PROPERTY
@given(
    st.lists(st.text(TRICKY, max_size=4), min_size=4, max_size=4),
    st.integers(0, 2),
    st.text(TRICKY, min_size=1, max_size=3),
    st.sampled_from(["|", "#", "%7C", "|v", "#c2#"]),
)
def test_moving_text_across_a_part_boundary_changes_the_key(
    parts: list[str], index: int, chunk: str, separator: str
) -> None:
    """The same characters split differently between two parts never give the same key."""
    left = list(parts)
    right = list(parts)
    left[index] += separator + chunk
    right[index + 1] = chunk + separator + right[index + 1]
    first = (left[0], left[1], left[2], left[3], None)
    second = (right[0], right[1], right[2], right[3], None)
    if identity(first) != identity(second):
        assert make_key(first) != make_key(second)
