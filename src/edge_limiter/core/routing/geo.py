"""Ordering a pool's origins for one client: nearest first, deterministically.

The order, each rule breaking the ties of the one before:

1. origins that list the client's country;
2. origins that list the client's continent;
3. great-circle distance, for origins whose coordinates are known when the client's are
   (origins with coordinates come before those without);
4. ``priority``, lower first;
5. name (unique across pools), then URL: a total order, so every isolate tries origins in
   the same order for the same client, also when the request carries no location at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from math import asin, cos, inf, isfinite, radians, sin, sqrt

from .origins import CONTINENTS, Origin

#: The mean Earth radius (IUGG), in km.
EARTH_RADIUS_KM = 6371.0088


@dataclass(frozen=True, slots=True)
class ClientLocation:
    """Where a client is, as far as the edge knows; any field may be ``None``.

    ``country`` is ISO 3166 alpha-2 and ``continent`` one of Cloudflare's codes, both
    upper-case; coordinates are in degrees.
    """

    country: str | None = None
    continent: str | None = None
    latitude: float | None = None
    longitude: float | None = None

    @classmethod
    def from_cf(cls, cf: Mapping[str, object] | None) -> ClientLocation:
        """Read ``request.cf`` (already converted to a mapping); unusable fields become ``None``.

        Cloudflare sends coordinates as strings and uses ``XX`` for an unknown country and
        ``T1`` for Tor, neither of which an origin can serve.
        """
        if cf is None:
            return cls()
        country = _code(cf.get("country"))
        if country in ("XX", "T1"):
            country = None
        continent = _code(cf.get("continent"))
        if continent not in CONTINENTS:
            continent = None
        latitude = _degrees(cf.get("latitude"), 90)
        longitude = _degrees(cf.get("longitude"), 180)
        if latitude is None or longitude is None:
            latitude = longitude = None
        return cls(country, continent, latitude, longitude)


def _code(value: object) -> str | None:
    if isinstance(value, str) and len(value) == 2 and value.isascii() and value.isalnum():
        return value.upper()
    return None


def _degrees(value: object, limit: float) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and isfinite(value) and -limit <= value <= limit:
        return float(value)
    return None


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """The distance between two points on a spherical Earth, by the haversine formula."""
    phi1, phi2 = radians(lat1), radians(lat2)
    half_dphi = (phi2 - phi1) / 2
    half_dlambda = radians(lon2 - lon1) / 2
    h = sin(half_dphi) ** 2 + cos(phi1) * cos(phi2) * sin(half_dlambda) ** 2
    # Rounding can push h a hair above 1 for antipodal points; asin needs <= 1.
    return 2 * EARTH_RADIUS_KM * asin(sqrt(min(1.0, h)))


def _sort_key(origin: Origin, location: ClientLocation) -> tuple[int, float, int, str, str]:
    country = location.country
    continent = location.continent
    if country is not None and country in origin.countries:
        tier = 0
    elif continent is not None and continent in origin.continents:
        tier = 1
    else:
        tier = 2
    distance = inf
    if (
        location.latitude is not None
        and location.longitude is not None
        and origin.latitude is not None
        and origin.longitude is not None
    ):
        distance = great_circle_km(
            location.latitude, location.longitude, origin.latitude, origin.longitude
        )
    # inf sorts after every real distance: within a tier, unknown coordinates come last.
    return (tier, distance, origin.priority, origin.name, origin.url)


def order_origins(origins: Iterable[Origin], location: ClientLocation) -> tuple[Origin, ...]:
    """``origins`` in the order to try them for a client at ``location`` (see the module doc)."""
    return tuple(sorted(origins, key=lambda origin: _sort_key(origin, location)))
