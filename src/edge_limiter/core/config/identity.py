"""The schema of ``[auth.NAME]`` (verified JSON Web Tokens), ``[tiers]`` (plan tiers) and
a route's identity fields (``auth``, ``on_invalid``, ``tiers``, ``group``), and their
parsers. Rules between them (a route naming a source or a group that does not exist, a
``jwt:`` key part on a route without ``auth``) are checked here too, each problem naming
the table and field."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..errors import KeySpecError
from ..identity.apikeys import FOUND_TTL_MS, MAX_KEY_TTL_MS, MIN_KEY_TTL_MS
from ..identity.jwks import MAX_REFETCH_MS, MIN_REFETCH_MS, REFETCH_INTERVAL_MS
from ..identity.keys import Jwk, UnusableKeyError, parse_jwk, pem_key
from ..identity.settings import (
    DEFAULT_LEEWAY_MS,
    DEFAULT_MAX_TOKEN_BYTES,
    MAX_LEEWAY_MS,
    AuthSource,
    Plan,
    RouteIdentity,
    Tiers,
    TokenPlace,
)
from ..identity.tiers import named_for
from ..identity.tokens import (
    ALGORITHMS,
    MAX_TOKEN_BYTES,
    ClaimPathError,
    claim_path,
    claim_steps,
)
from ..keys import KeySpec, parse_key_part
from ..ratelimit.rates import Limit
from ..validation import Problems, shown, table
from .fields import Choice, Duration, Flag, Hand, Size, Sub, Text
from .limits import parse_limits
from .model import Route
from .table import Reader, Table

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_NAME_RULE = "1 to 32 letters, digits, '_', '.' or '-', starting with a letter or digit"
_TOKEN_PLACE_RE = r"bearer|(header|cookie):[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_TOKEN_PLACE_RULE = "'bearer', 'header:NAME' or 'cookie:NAME'"
_PUBLIC = tuple(alg for alg in ALGORITHMS if alg != "HS256")
_LOOPBACK_HOSTS = frozenset(("localhost",))

# fmt: off
AUTH = Table("auth.NAME", (
    "A source of JSON Web Tokens that the gateway verifies at the edge, before any counter is "
    "touched: where the token is, who issues it, and the keys that verify it. Routes name it "
    "in `auth`; key parts `jwt:CLAIM` read its verified claims. See docs/identity.md."
), (
    Text("token", _TOKEN_PLACE_RE, _TOKEN_PLACE_RULE, default="bearer",
         example="header:Cf-Access-Jwt-Assertion",
         doc="Where requests carry the token: `bearer` (`Authorization: Bearer TOKEN`), "
             "`header:NAME` (the whole field, e.g. Cloudflare Access's "
             "`Cf-Access-Jwt-Assertion`) or `cookie:NAME`."),
    Hand("issuer", "string", default_text="not checked", example="https://auth.example.com/",
         doc="The `iss` every token must carry, exactly."),
    Hand("audiences", "list of strings", default_text="not checked", example=["api"],
         doc="A token's `aud` (a string or a list) must name one of these."),
    Hand("algorithms", "list of algorithms", required=True, example=["RS256"],
         doc="The algorithms accepted, of `RS256`, `PS256`, `ES256`, `ES384`, `EdDSA`, "
             "`HS256`; a token's `alg` must be one of them and fit its key's type (`none` "
             "never is). Each needs a key: `HS256` a `secret`, the others `jwks_url` or "
             "`keys`."),
    Hand("jwks_url", "URL", null_is_absent=True, default_text="none",
         example="https://auth.example.com/.well-known/jwks.json",
         doc="Where the issuer publishes its public keys (JWKS): https (http only on "
             "loopback, for local tests). Kept for its `Cache-Control` lifetime (1 minute.."
             "1 day, 5 minutes without one) in the isolate and KV, fetched again on an "
             "unknown `kid` at most once per `refetch_after`, served stale for a day while "
             "the endpoint fails."),
    Duration("refetch_after", MIN_REFETCH_MS, MAX_REFETCH_MS, default=REFETCH_INTERVAL_MS,
             example="10s",
             doc="With `jwks_url`: the least time between two fetches of the key set for a "
                 "token whose `kid` it lacks (a provider that signs with a new key as soon "
                 "as it publishes it): shorter picks a rotation up sooner; tokens with "
                 "made-up `kid`s cost one fetch per interval per isolate at most."),
    Hand("keys", "list of JWKs or PEM strings", default_text="none",
         example=["-----BEGIN PUBLIC KEY-----\n"
                  "MCowBQYDK2VwAyEA2dNXJQ79n6BWjXx3UVkErZXvKb0QNtxy3N3fjHYAUDo=\n"
                  "-----END PUBLIC KEY-----\n"],
         example_with={"algorithms": ["ES256", "EdDSA"]}, attr=None,
         doc="Public keys written in the config: JWK tables or `PUBLIC KEY` PEM strings (RSA "
             "of 2048 bits or more, EC P-256 or P-384, Ed25519). No private or secret key "
             "belongs here."),
    Text("secret", r"\$[A-Za-z_][A-Za-z0-9_]*", "a Worker secret's name like '$JWT_SECRET'",
         null_is_absent=True, default_text="none", example="$JWT_SECRET",
         example_with={"algorithms": ["HS256"], "jwks_url": None},
         doc="The HS256 key: the Worker secret of that name (`npx wrangler secret put`), "
             "its UTF-8 bytes, at least 32 of them. HS256 only."),
    Duration("leeway", 0, MAX_LEEWAY_MS, default=DEFAULT_LEEWAY_MS, example="30s",
             doc="How far `exp`, `nbf` and `iat` may be off, for clocks that disagree."),
    Hand("required_claims", "list of claim paths", default=("exp",), example=["exp", "sub"],
         doc="Claims every token must carry (paths as in `jwt:` key parts: `org.id`, "
             "`'\"https://example.com/plan\"'`); `exp` unless you say otherwise "
             "(a token that never expires is a password)."),
    Size("max_token_bytes", 256, MAX_TOKEN_BYTES, default=DEFAULT_MAX_TOKEN_BYTES,
         example=4096,
         doc="The longest token read: a longer one is refused before any of it is decoded."),
))

PLAN = Table("tiers.plans.NAME", (
    'A tier as a table (a tier may also be written as a rate string, or `"exempt"`).'
), (
    Hand("limits", "rates", default_text="the route's", example="100000/hour",
         doc="The tier's limits on every tiered route `routes` does not name."),
    Flag("leases", default=False, example=True,
         doc="Whether the tier's limits are counted with leases (see a route's `leases`), "
             "for callers hot enough to need them."),
    Hand("routes", "table of rates by route or group", default_text="none",
         example={"search": "10/second"},
         doc="Limits for one route (by name) or one `group` of routes, in place of "
             "`limits`."),
))

TIERS = Table("tiers", (
    "Plan tiers: each caller's limits on a route with `tiers = true` come from its tier, read "
    "from a verified claim or from its API key's record in KV. See docs/identity.md."
), (
    Text("by", r"jwt:\S+|kv:[A-Za-z_][A-Za-z0-9_]*",
         "'jwt:CLAIM' or 'kv:BINDING'", required=True, example="jwt:plan",
         doc="Where a caller's tier comes from: a claim of the route's verified token "
             "(`jwt:plan`; a name with dots quoted, `'jwt:\"https://example.com/plan\"'`), or the record of its API key in a KV namespace (`kv:API_KEYS`: "
             "the value under the SHA-256 hex of the key)."),
    Text("api_key", _TOKEN_PLACE_RE, _TOKEN_PLACE_RULE, default="header:x-api-key",
         example="bearer",
         doc="With `by = \"kv:...\"`: where requests carry their API key."),
    Duration("api_key_ttl", MIN_KEY_TTL_MS, MAX_KEY_TTL_MS, default=FOUND_TTL_MS,
             example="10s",
             doc="With `by = \"kv:...\"`: how long an isolate remembers an API key's record "
                 "once read from KV, so a change of tier or a deleted key takes effect within "
                 "it (plus KV's own propagation, up to about a minute). \"No such key\" is "
                 "remembered half as long. Shorter costs more KV reads."),
    Text("default", NAME_RE.pattern, _NAME_RULE, required=True, example="pro",
         doc="The tier of a verified caller whose claim or record names no tier of `plans`."),
    Text("anonymous", NAME_RE.pattern, _NAME_RULE, null_is_absent=True, default_text="`default`",
         example="pro",
         doc="The tier of a caller without a valid token or key on a route with "
             '`on_invalid = "anonymous"` (counted by its address).'),
    Sub("plans", PLAN, many="map", required=True, type="tiers by name",
        example={"free": "100/hour", "pro": "10000/hour", "internal": "exempt"},
        doc='Each tier: a rate string (`"100/hour"`), `"exempt"` (never limited), or a table.'),
))
# fmt: on


def _shown(name: str) -> Any:
    def show(route: Route) -> object:
        return getattr(route.identity, name) if route.identity is not None else None

    return show


# fmt: off
IDENTITY_FIELDS = (
    Hand("auth", "auth source name", null_is_absent=True, default_text="none",
         example="main", attr=None, show=_shown("auth"),
         doc="Verify the token of `[auth.NAME]` on every request of this route before it is "
             "counted; key parts `jwt:CLAIM` read its claims."),
    Choice("on_invalid", ("reject", "anonymous"), default="reject", example="anonymous",
           example_with={"auth": "main"},
           attr=None, show=_shown("on_invalid"),
           doc="What a missing or invalid token (or an unknown API key) gets: `reject` answers "
               "`401` (`WWW-Authenticate: Bearer error=\"invalid_token\"`), counted under the "
               "client's address by the route's `limits`; `anonymous` forwards it under the "
               "`anonymous` tier, counted by its address."),
    Flag("tiers", default=False, example=True, example_with={"auth": "main"}, attr=None, show=_shown("tiers"),
         doc="This route's limits come from the caller's tier (`[tiers]`); its own `limits` "
             "count what no tier covers."),
    Text("group", NAME_RE.pattern, _NAME_RULE, null_is_absent=True, default_text="none",
         example="search", attr=None, show=_shown("group"),
         doc="A name several routes share, for a tier's `routes` table."),
)
# fmt: on


def _strings(value: object, where: str, problems: Problems, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(i, str) and i for i in value):
        problems.add(where, f"must be a list of {what}, got {shown(value)}")
        return ()
    return tuple(dict.fromkeys(value))


def _claim_paths(value: object, where: str, problems: Problems) -> tuple[str, ...]:
    """Claim paths (``sub``, ``org.id``, ``"https://example.com/plan"``), each in its one
    spelling."""
    paths = _strings(value, where, problems, "claim paths")
    out = []
    for index, path in enumerate(paths):
        try:
            out.append(claim_path(claim_steps(path)))
        except ClaimPathError as exc:
            problems.add(f"{where}[{index}]", f"{path!r}: {exc}")
    return tuple(dict.fromkeys(out))


def _token_place(text: str) -> TokenPlace:
    kind, _, name = text.partition(":")
    return TokenPlace(kind, name.lower() if kind == "header" else name)


def jwks_url(value: object, where: str, problems: Problems) -> str | None:
    """An https URL (http on a loopback host, for local tests), or ``None`` after a problem."""
    if not isinstance(value, str) or any(ch <= " " or ch == "\x7f" for ch in value):
        problems.add(where, f"must be an https URL, got {shown(value)}")
        return None
    parts = urlsplit(value)
    host = parts.hostname or ""
    if parts.scheme == "http" and _loopback(host):
        return value
    if parts.scheme != "https" or not host or "@" in parts.netloc or "\\" in value:
        problems.add(
            where,
            f"must be an https URL (http only on a loopback host), got {shown(value)}",
        )
        return None
    return value


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _inline_keys(value: object, where: str, problems: Problems) -> tuple[Jwk, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(where, f"must be a list of JWK tables or PEM strings, got {shown(value)}")
        return ()
    keys: list[Jwk] = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        try:
            if isinstance(item, str):
                keys.append(pem_key(item))
            elif isinstance(item, Mapping):
                if item.get("kty") == "oct":
                    problems.add(
                        at,
                        "is a secret key (kty oct): a secret never goes in the config; "
                        "write secret = '$NAME' for a Worker secret",
                    )
                    continue
                keys.append(parse_jwk(item))
            else:
                problems.add(at, f"must be a JWK table or a PEM string, got {shown(item)}")
        except UnusableKeyError as exc:
            problems.add(at, str(exc))
    return tuple(keys)


def parse_auth(raw: object, problems: Problems) -> dict[str, AuthSource]:
    """Every ``[auth.NAME]`` (a broken one is left out: its problems say why)."""
    if raw is None:
        return {}
    sources = table(raw, "config.auth", problems)
    if sources is None:
        return {}
    out: dict[str, AuthSource] = {}
    for name, body in sources.items():
        where = f"auth {shown(name)}"
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            problems.add(where, f"a source's name must be {_NAME_RULE}")
            continue
        source = _auth_source(name, body, where, problems)
        if source is not None:
            out[name] = source
    return out


def _auth_source(name: str, body: object, where: str, problems: Problems) -> AuthSource | None:
    before = len(problems)
    got = AUTH.read(body, where, problems)
    if got is None:
        return None
    token = _token_place(got.text("token"))
    issuer = got.raw.get("issuer")
    if issuer is not None and (not isinstance(issuer, str) or not issuer):
        problems.add(f"{where}.issuer", f"must be a non-empty string, got {shown(issuer)}")
    audiences: tuple[str, ...] = ()
    if got.raw.get("audiences") is not None:
        audiences = _strings(got.raw["audiences"], f"{where}.audiences", problems, "strings")
    algorithms: frozenset[str] = frozenset()
    raw_algs = got.raw.get("algorithms")
    if raw_algs is None:
        problems.add(f"{where}.algorithms", f"is required: a list of {', '.join(ALGORITHMS)}")
    else:
        listed = _strings(raw_algs, f"{where}.algorithms", problems, "algorithm names")
        for alg in listed:
            if alg not in ALGORITHMS:
                hint = " (an unsigned token is never accepted)" if alg.lower() == "none" else ""
                problems.add(
                    f"{where}.algorithms",
                    f"{alg!r} is not one of {', '.join(ALGORITHMS)}{hint}",
                )
        algorithms = frozenset(alg for alg in listed if alg in ALGORITHMS)
        if raw_algs == []:
            problems.add(f"{where}.algorithms", "must name at least one algorithm")
    url = None
    if got.raw.get("jwks_url") is not None:
        url = jwks_url(got.raw["jwks_url"], f"{where}.jwks_url", problems)
    keys = _inline_keys(got.raw.get("keys"), f"{where}.keys", problems)
    secret_ref = got.optional_text("secret")
    leeway = got.ms("leeway")
    required: tuple[str, ...] = ("exp",)
    if got.raw.get("required_claims") is not None:
        required = _claim_paths(got.raw["required_claims"], f"{where}.required_claims", problems)
    max_bytes = got.integer("max_token_bytes")
    refetch_after = got.ms("refetch_after")
    _key_rules(where, algorithms, url, keys, secret_ref, problems=problems)
    if len(problems) != before:
        return None
    return AuthSource(
        name=name,
        token=token,
        algorithms=algorithms,
        issuer=issuer if isinstance(issuer, str) else None,
        audiences=audiences,
        jwks_url=url,
        keys=keys,
        secret=secret_ref[1:] if secret_ref else None,
        leeway_ms=leeway,
        required_claims=required,
        max_token_bytes=max_bytes,
        refetch_after_ms=refetch_after,
    )


def _key_rules(
    where: str,
    algorithms: frozenset[str],
    url: str | None,
    keys: tuple[Jwk, ...],
    secret: str | None,
    *,
    problems: Problems,
) -> None:
    """Every algorithm has a key that can verify it, and no key source is there for nothing."""
    if "HS256" in algorithms and secret is None:
        problems.add(
            f"{where}.algorithms",
            "HS256 needs secret = '$NAME' (a Worker secret): public keys never verify an "
            "HMAC token (that is the classic key confusion)",
        )
    if secret is not None and "HS256" not in algorithms:
        problems.add(
            f"{where}.secret",
            "only verifies HS256, which algorithms does not list: a public-key algorithm "
            "is never checked against a secret",
        )
    public = sorted(algorithms & set(_PUBLIC))
    if public and url is None:
        unkeyed = [alg for alg in public if not any(key.verifies(alg) for key in keys)]
        if unkeyed:
            problems.add(
                f"{where}.algorithms",
                f"{', '.join(unkeyed)} need a public key: set jwks_url, or keys with one "
                f"that fits{' (a secret verifies HS256 only)' if secret else ''}",
            )
    for index, key in enumerate(keys):
        if not any(key.verifies(alg) for alg in algorithms):
            problems.add(
                f"{where}.keys[{index}]",
                f"a {key.kty} key verifies none of the algorithms listed",
            )


def _plan_limits(value: object, where: str, problems: Problems) -> tuple[Limit, ...]:
    return tuple(parse_limits(value, where, problems))


def parse_tiers(
    raw: object, problems: Problems, kv_bindings: frozenset[str] | None = None
) -> Tiers | None:
    """``[tiers]``, or ``None`` when absent (or too broken to use: its problems say why).
    Rates are read as a route's ``limits`` are. ``kv_bindings``:
    the KV namespaces the Worker has, where known (a ``kv:`` source must name one)."""
    if raw is None:
        return None
    where = "config.tiers"
    before = len(problems)
    got = TIERS.read(raw, where, problems)
    if got is None:
        return None
    by = got.text("by", "")
    kind, _, source = by.partition(":")
    if kind == "jwt":
        try:
            source = parse_key_part(by).name  # one spelling of the claim's path
        except KeySpecError as exc:
            problems.add(f"{where}.by", str(exc).replace("key part", "claim"))
    elif kind == "kv" and kv_bindings is not None and source not in kv_bindings:
        known = ", ".join(sorted(kv_bindings)) or "none"
        problems.add(
            f"{where}.by",
            f"names the KV binding {source!r}, which wrangler.toml does not declare "
            f"(its kv_namespaces: {known})",
        )
    api_key = _token_place(got.text("api_key"))
    if kind == "jwt" and "api_key" in got.raw:
        problems.warn(f"{where}.api_key", "has no effect: tiers come from a claim (by = 'jwt:')")
    plans: dict[str, Plan] = {}
    raw_plans = got.raw.get("plans")
    plans_table = table(raw_plans, f"{where}.plans", problems) if raw_plans is not None else None
    if raw_plans is None:
        problems.add(f"{where}.plans", "is required: the tiers by name")
    for name, body in (plans_table or {}).items():
        at = f"{where}.plans.{name}"
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            problems.add(at, f"a tier's name must be {_NAME_RULE}")
            continue
        plan = _plan(name, body, at, problems)
        if plan is not None:
            plans[name] = plan
    default = got.text("default", "")
    anonymous = got.optional_text("anonymous") or default
    written = [str(name) for name in plans_table or {}]
    for field, named in (("default", default), ("anonymous", anonymous)):
        if got.given(field) and not got.refused(field) and named not in written:
            problems.add(
                f"{where}.{field}",
                f"names no tier of plans (known: {', '.join(written) or 'none'}), "
                f"got {shown(named)}",
            )
    if len(problems) != before:
        return None
    ttl = got.ms("api_key_ttl")
    if kind == "jwt" and "api_key_ttl" in got.raw:
        problems.warn(
            f"{where}.api_key_ttl", "has no effect: tiers come from a claim (by = 'jwt:')"
        )
    return Tiers(kind, source, default, anonymous, plans, api_key, ttl)


def _plan(name: str, body: object, where: str, problems: Problems) -> Plan | None:
    if body == "exempt":
        return Plan(name, exempt=True)
    if isinstance(body, str):
        return Plan(name, limits=named_for(name, _plan_limits(body, where, problems)))
    got = PLAN.read(body, where, problems)
    if got is None:
        return None
    limits: tuple[Limit, ...] = ()
    if got.raw.get("limits") is not None:
        limits = _plan_limits(got.raw["limits"], f"{where}.limits", problems)
    routes: dict[str, tuple[Limit, ...]] = {}
    raw_routes = got.raw.get("routes")
    if raw_routes is not None:
        by_route = table(raw_routes, f"{where}.routes", problems)
        for route, value in (by_route or {}).items():
            found = _plan_limits(value, f"{where}.routes.{route}", problems)
            routes[route] = named_for(name, found)
    if not limits and not routes:
        problems.add(where, "names no limits: write limits, routes, or the tier as 'exempt'")
    return Plan(name, False, named_for(name, limits), got.flag("leases"), routes)


def parse_route_identity(
    got: Reader,
    auth: Mapping[str, AuthSource],
    tiers: Tiers | None,
    problems: Problems,
    written: tuple[frozenset[str], bool] = (frozenset(), False),
) -> RouteIdentity | None:
    """A route's ``auth``, ``on_invalid``, ``tiers`` and ``group`` (``None``: it uses none).
    ``written``: every auth source name the config writes and whether it has a ``[tiers]``
    table, broken ones included (their own problems say what is wrong)."""
    where = got.where
    name = got.raw.get("auth")
    sources_written, tiers_written = written
    if name is not None and (
        not isinstance(name, str) or (name not in auth and name not in sources_written)
    ):
        known = ", ".join(auth) or "none defined"
        problems.add(f"{where}.auth", f"names no [auth] source (known: {known}), got {shown(name)}")
    on_invalid = got.text("on_invalid")
    tiered = got.flag("tiers")
    group = got.optional_text("group")
    if tiered and tiers is None and not tiers_written:
        problems.add(f"{where}.tiers", "is true, but the config has no [tiers] table")
    if tiered and tiers is not None and tiers.by == "jwt" and name is None:
        problems.add(
            f"{where}.tiers",
            f"takes the tier from the claim {tiers.source!r} (tiers.by), which needs a verified "
            "token: set auth on this route",
        )
    if "on_invalid" in got.raw and name is None and not (tiered and tiers and tiers.by == "kv"):
        problems.warn(f"{where}.on_invalid", "has no effect: the route checks no token or key")
    if on_invalid == "anonymous" and tiers is None and (name is not None):
        problems.add(
            f"{where}.on_invalid",
            "'anonymous' forwards under the anonymous tier's limits: the config needs [tiers]",
        )
    if name is None and not tiered and group is None:
        return None
    return RouteIdentity(name if isinstance(name, str) else None, on_invalid, tiered, group)


def check_identity_keys(
    route_where: str,
    key: KeySpec,
    identity: RouteIdentity | None,
    tiers: Tiers | None,
    problems: Problems,
    *,
    tiers_written: bool = False,
) -> None:
    """The route's ``jwt:`` and ``apikey`` key parts have a verified identity to read
    (``tiers_written``: the config writes a ``[tiers]`` too broken to use, whose own
    problems are said)."""
    for part in key.parts:
        if part.kind == "jwt" and (identity is None or identity.auth is None):
            problems.add(
                f"{route_where}.key",
                f"{part} reads a verified token's claim: set auth on this route (else any "
                "client could write the claim)",
            )
        if tiers is None and tiers_written:
            continue
        if part.kind == "apikey" and not (
            identity is not None and identity.tiers and tiers is not None and tiers.by == "kv"
        ):
            problems.add(
                f"{route_where}.key",
                "apikey is the caller's API key record: the route needs tiers = true with "
                "[tiers] by = 'kv:BINDING'",
            )


def check_tier_routes(tiers: Tiers | None, routes: list[Route], problems: Problems) -> None:
    """Every route or group a tier's ``routes`` names exists, on a tiered route."""
    if tiers is None:
        return
    names = {route.name for route in routes if route.identity and route.identity.tiers}
    groups = {
        route.identity.group
        for route in routes
        if route.identity and route.identity.tiers and route.identity.group
    }
    for plan in tiers.plans.values():
        for name in plan.routes:
            if name not in names and name not in groups:
                problems.add(
                    f"config.tiers.plans.{plan.name}.routes.{name}",
                    "names no route or group with tiers = true (known: "
                    f"{', '.join(sorted(names | groups)) or 'none'})",
                )


__all__ = [
    "AUTH",
    "IDENTITY_FIELDS",
    "PLAN",
    "TIERS",
    "check_identity_keys",
    "check_tier_routes",
    "parse_auth",
    "parse_route_identity",
    "parse_tiers",
]
