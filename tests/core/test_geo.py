"""Ordering origins for a client: a table of client locations, the distance formula, reading
``request.cf``, and properties (a permutation, deterministic, country matches first)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.routing.geo import ClientLocation, great_circle_km, order_origins
from edge_limiter.core.routing.origins import Origin
from tests.examples import examples

EU = Origin(
    "eu",
    "https://eu.example.com",
    countries=("CH", "GB"),
    continents=("EU",),
    latitude=50.11,  # Frankfurt
    longitude=8.68,
    priority=1,
)
US_EAST = Origin(
    "us-east",
    "https://use.example.com",
    countries=("CA", "US"),
    continents=("NA",),
    latitude=39.04,  # Ashburn
    longitude=-77.49,
)
US_WEST = Origin(
    "us-west",
    "https://usw.example.com",
    continents=("NA",),
    latitude=37.34,  # San Jose
    longitude=-121.89,
)
AP = Origin(
    "ap",
    "https://ap.example.com",
    countries=("AU", "JP", "SG"),
    continents=("AS", "OC"),
    latitude=1.35,  # Singapore
    longitude=103.82,
    priority=2,
)
FALLBACK = Origin("fallback", "https://fallback.example.com", priority=5)
ORIGINS = (EU, US_EAST, US_WEST, AP, FALLBACK)


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        # A country match first, then everything else by distance.
        (ClientLocation("GB", "EU", 51.51, -0.13), ["eu", "us-east", "us-west", "ap", "fallback"]),
        # A continent match when no origin lists the country.
        (ClientLocation("FR", "EU", 48.86, 2.35), ["eu", "us-east", "us-west", "ap", "fallback"]),
        (ClientLocation("IN", "AS", 19.08, 72.88), ["ap", "eu", "us-east", "us-west", "fallback"]),
        # The country beats a nearer origin on the same continent (San Francisco).
        (
            ClientLocation("US", "NA", 37.77, -122.42),
            ["us-east", "us-west", "eu", "ap", "fallback"],
        ),
        # Two continent matches, nearer first (Havana: Ashburn 1,830 km, San Jose 4,077 km).
        (ClientLocation("CU", "NA", 23.11, -82.37), ["us-east", "us-west", "eu", "ap", "fallback"]),
        (ClientLocation("JP", "AS", 35.68, 139.69), ["ap", "us-west", "eu", "us-east", "fallback"]),
        # No match at all: by distance (Nairobi), the origin without coordinates last.
        (ClientLocation("KE", "AF", -1.29, 36.82), ["eu", "ap", "us-east", "us-west", "fallback"]),
        # Coordinates only (Sydney).
        (
            ClientLocation(None, None, -33.87, 151.21),
            ["ap", "us-west", "us-east", "eu", "fallback"],
        ),
        # No coordinates: priority, then name.
        (ClientLocation("CH", None, None, None), ["eu", "us-east", "us-west", "ap", "fallback"]),
        (ClientLocation(None, "OC", None, None), ["ap", "us-east", "us-west", "eu", "fallback"]),
        (ClientLocation(), ["us-east", "us-west", "eu", "ap", "fallback"]),
    ],
)
def test_order_for_client_locations(client: ClientLocation, expected: list[str]) -> None:
    assert [o.name for o in order_origins(ORIGINS, client)] == expected


def test_distance_orders_within_a_tier_and_unknown_coordinates_come_last() -> None:
    near = Origin(
        "z-near", "https://a.example.com", continents=("EU",), latitude=48.0, longitude=2.0
    )
    far = Origin(
        "a-far", "https://b.example.com", continents=("EU",), latitude=60.0, longitude=25.0
    )
    blind = Origin("0-blind", "https://c.example.com", continents=("EU",), priority=-100)
    paris = ClientLocation("FR", "EU", 48.86, 2.35)
    assert [o.name for o in order_origins((blind, far, near), paris)] == [
        "z-near",
        "a-far",
        "0-blind",
    ]
    # Without the client's coordinates the same three go by priority, then name.
    assert [o.name for o in order_origins((near, far, blind), ClientLocation("FR", "EU"))] == [
        "0-blind",
        "a-far",
        "z-near",
    ]


def test_priority_breaks_equal_distances_then_name() -> None:
    a = Origin("b", "https://b.example.com", latitude=10.0, longitude=10.0, priority=1)
    b = Origin("c", "https://c.example.com", latitude=10.0, longitude=10.0, priority=0)
    c = Origin("a", "https://a.example.com", latitude=10.0, longitude=10.0, priority=1)
    client = ClientLocation(latitude=0.0, longitude=0.0)
    assert [o.name for o in order_origins((a, b, c), client)] == ["c", "a", "b"]


def test_an_empty_pool_orders_to_nothing() -> None:
    assert order_origins((), ClientLocation("GB", "EU", 51.5, 0.0)) == ()


@pytest.mark.parametrize(
    ("points", "km"),
    [
        ((51.5074, -0.1278, 40.7128, -74.0060), 5_570),  # London - New York
        ((48.8566, 2.3522, 51.5074, -0.1278), 344),  # Paris - London
        ((0.0, 0.0, 0.0, 180.0), 20_015),  # half the equator
        ((90.0, 0.0, -90.0, 0.0), 20_015),  # pole to pole
        ((10.0, 20.0, 10.0, 20.0), 0),
    ],
)
def test_great_circle_distance(points: tuple[float, float, float, float], km: int) -> None:
    assert great_circle_km(*points) == pytest.approx(km, abs=1)


@given(
    st.floats(-90, 90),
    st.floats(-180, 180),
    st.floats(-90, 90),
    st.floats(-180, 180),
)
def test_distance_is_symmetric_and_bounded(a: float, b: float, c: float, d: float) -> None:
    there = great_circle_km(a, b, c, d)
    assert 0 <= there <= 20_016
    assert there == pytest.approx(great_circle_km(c, d, a, b), abs=1e-6)


# --- reading request.cf ---------------------------------------------------------------------


def test_from_cf_reads_cloudflares_fields() -> None:
    cf = {"country": "GB", "continent": "EU", "latitude": "51.50740", "longitude": "-0.12780"}
    assert ClientLocation.from_cf(cf) == ClientLocation("GB", "EU", 51.5074, -0.1278)


@pytest.mark.parametrize(
    ("cf", "expected"),
    [
        (None, ClientLocation()),
        ({}, ClientLocation()),
        ({"country": "gb", "continent": "eu"}, ClientLocation("GB", "EU")),
        ({"country": "XX"}, ClientLocation()),
        ({"country": "T1", "continent": "EU"}, ClientLocation(None, "EU")),
        ({"country": "GBR", "continent": "Europe"}, ClientLocation()),
        ({"country": 44, "continent": None}, ClientLocation()),
        ({"continent": "ZZ"}, ClientLocation()),
        ({"latitude": "51.5"}, ClientLocation()),  # one coordinate is none
        ({"latitude": "north", "longitude": "0"}, ClientLocation()),
        ({"latitude": "91", "longitude": "0"}, ClientLocation()),
        ({"latitude": "0", "longitude": "-181"}, ClientLocation()),
        ({"latitude": "nan", "longitude": "0"}, ClientLocation()),
        ({"latitude": True, "longitude": False}, ClientLocation()),
        ({"latitude": 12, "longitude": 34.5}, ClientLocation(latitude=12.0, longitude=34.5)),
    ],
)
def test_from_cf_drops_what_it_cannot_use(
    cf: dict[str, object] | None, expected: ClientLocation
) -> None:
    assert ClientLocation.from_cf(cf) == expected


# --- properties -----------------------------------------------------------------------------

COUNTRY_CODES = ("GB", "CH", "US", "JP", "BR")
CONTINENT_CODES = ("EU", "NA", "AS", "SA")
COORDS = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from([-45.0, 0.0, 10.0, 50.0]), st.sampled_from([-120.0, 0.0, 8.0, 100.0])
    ),
    st.tuples(st.floats(-90, 90), st.floats(-180, 180)),
)


@st.composite
def origin_lists(draw: st.DrawFn) -> list[Origin]:
    names = draw(st.lists(st.text("abcxyz-", min_size=1, max_size=4), unique=True, max_size=8))
    origins = []
    for name in names:
        coords = draw(COORDS)
        origins.append(
            Origin(
                name,
                f"https://{name}.example.com",
                countries=tuple(sorted(draw(st.sets(st.sampled_from(COUNTRY_CODES), max_size=2)))),
                continents=tuple(
                    sorted(draw(st.sets(st.sampled_from(CONTINENT_CODES), max_size=2)))
                ),
                latitude=None if coords is None else coords[0],
                longitude=None if coords is None else coords[1],
                priority=draw(st.integers(-2, 2)),
            )
        )
    return origins


@st.composite
def locations(draw: st.DrawFn) -> ClientLocation:
    coords = draw(COORDS)
    return ClientLocation(
        draw(st.none() | st.sampled_from(COUNTRY_CODES)),
        draw(st.none() | st.sampled_from(CONTINENT_CODES)),
        None if coords is None else coords[0],
        None if coords is None else coords[1],
    )


def tier(origin: Origin, client: ClientLocation) -> int:
    if client.country is not None and client.country in origin.countries:
        return 0
    if client.continent is not None and client.continent in origin.continents:
        return 1
    return 2


def reference_key(origin: Origin, client: ClientLocation) -> tuple[int, int, float, int, str]:
    """The documented order, spelled out: tier, known distance first, distance, priority, name."""
    if (
        client.latitude is None
        or client.longitude is None
        or origin.latitude is None
        or origin.longitude is None
    ):
        return (tier(origin, client), 1, 0.0, origin.priority, origin.name)
    distance = great_circle_km(client.latitude, client.longitude, origin.latitude, origin.longitude)
    return (tier(origin, client), 0, distance, origin.priority, origin.name)


@settings(max_examples=examples(300), deadline=None)
@given(origin_lists(), locations(), st.randoms(use_true_random=False))
def test_order_is_a_deterministic_permutation_with_matches_first(
    origins: list[Origin], client: ClientLocation, rng: random.Random
) -> None:
    ordered = order_origins(origins, client)
    # A permutation ...
    assert sorted(o.name for o in ordered) == sorted(o.name for o in origins)
    # ... that depends neither on the call nor on the input order (names are unique).
    assert order_origins(origins, client) == ordered
    shuffled = list(origins)
    rng.shuffle(shuffled)
    assert order_origins(shuffled, client) == ordered
    # Country matches first, then continent matches, then the rest.
    tiers = [tier(o, client) for o in ordered]
    assert tiers == sorted(tiers)
    # Within a tier: known distances ascending, unknown ones after; then priority, name.
    keys = [reference_key(o, client) for o in ordered]
    assert keys == sorted(keys)


@given(origin_lists())
def test_without_location_the_order_is_priority_then_name(origins: list[Origin]) -> None:
    ordered = order_origins(origins, ClientLocation())
    assert [o.name for o in ordered] == [
        o.name for o in sorted(origins, key=lambda o: (o.priority, o.name))
    ]
