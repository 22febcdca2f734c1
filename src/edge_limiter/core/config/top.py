"""The schema of the config's top level and its small tables (``paths``, ``deny_cache``,
``admin``, ``overrides``, ``logging``, ``storage``, ``cors``), and their parsers."""

from __future__ import annotations

from ..caching.fields import HOP_BY_HOP, is_token
from ..canonical import MATRIX_MODES
from ..http.cors import CorsSettings, origin_problem
from ..http.method_override import MODES as OVERRIDE_MODES
from ..http.origin_headers import NEVER_SET, NOT_AN_ADDRESS
from ..validation import Problems, shown
from .fields import Choice, Duration, Flag, Hand, Integer, Number, Sub, Text
from .identity import AUTH, TIERS
from .model import (
    DEFAULT_ORIGIN_TIMEOUT_MS,
    DEFAULT_STORE_TIMEOUT_MS,
    MAX_ORIGIN_TIMEOUT_MS,
    MAX_STORE_TIMEOUT_MS,
    Operations,
)
from .pools import POOL
from .route import ROUTE
from .table import Reader, Table

_OPS = Operations()

# fmt: off
PATHS = Table("paths", (
    "How request paths are read before routes match them (every path is matched, counted and "
    "forwarded in its canonical form)."
), (
    Flag("case_insensitive", default=False, example=True,
         doc="Every route's `match.case_insensitive` default: match paths ignoring ASCII case, "
             "for an origin that does (IIS, ASP.NET)."),
    Choice("matrix_params", MATRIX_MODES, default="keep", example="strip",
           doc="`;params` inside a segment (`/v1/login;jsessionid=1`): `keep` them as part of "
               "the segment; `strip` them before matching and from the forwarded path (for "
               "origins that ignore them: Tomcat, Spring, Jetty); or `reject` such requests "
               "with `400`."),
))

DENY_CACHE = Table("deny_cache", (
    "When a key's Durable Object denies it, the isolate remembers the decision until the key "
    "would be admitted again and answers that key itself, with no object call. It never admits "
    "what the object would deny; shadow routes never use it."
), (
    Flag("enabled", default=True, example=False, doc="Whether denials are remembered."),
    Integer("max_keys", 1, 1_000_000, default=_OPS.deny_cache_max_keys, unit="keys",
            example=5000, doc="The most keys an isolate remembers (least recently used go "
                              "first)."),
    Duration("max_ttl", 1, 300_000, default=_OPS.deny_cache_ttl_ms, example="5s",
             doc="The longest a denial is remembered: a refund, reset or override made in "
                 "another isolate frees a key here within this."),
))

ADMIN = Table("admin", "The admin API and status page (enabled by the `EDGE_LIMITER_ADMIN_TOKEN` secret).", (
    Text("prefix", r"(/[A-Za-z0-9_.~-]+)+", "a path like '/_edge-limiter' (no trailing slash)",
         default=_OPS.admin_prefix, example="/_ops",
         doc="Where the admin API lives; its paths are never forwarded."),
))

OVERRIDES = Table("overrides", "Per-key overrides, changed at run time through the admin API.", (
    Duration("refresh", 1_000, 300_000, default=_OPS.overrides_refresh_ms, example="30s",
             doc="How often each isolate reloads the overrides: one is in effect everywhere "
                 "within `refresh + deny_cache.max_ttl`."),
))

LOGGING = Table("logging", (
    "The JSON log lines of decisions (denials, shadow hits and store failures are logged; "
    "a key's repeated denials at most once per `denials_every`, each line counting those "
    "it stands for)."
), (
    Number("sample_allowed", 0, 1, default=_OPS.sample_allowed, unit="share", example=0.01,
           doc="The share of allowed requests logged too."),
    Duration("denials_every", 0, 3_600_000, default=_OPS.denials_every_ms, example="10s",
             doc="At most one line per key and route in each isolate this often for its "
                 "denials (`limited`, `cached_denial`); a line's `repeats` counts the "
                 "denials since that key's previous line that had none, so the lines "
                 "still add up to every denial (`1 + repeats` each). `0s`: a line per "
                 "denial. A one-key flood otherwise prints a line per request."),
    Number("near_limit", 0, 1, default=_OPS.near_limit, unit="share", example=0.9,
           doc="The share of a limit used from which a decision is marked `near_limit`."),
))

STORAGE = Table("storage", "How the keys' Durable Objects keep their rows.", (
    Duration("cleanup_after", 1_000, 86_400_000, default=_OPS.cleanup_after_ms, example="5m",
             doc="Idle rows (a key whose limits are all replenished) are deleted by the "
                 "object's alarm, armed at most once per this interval."),
))

CORS = Table("cors", (
    "CORS on the gateway's own answers (`429`, `503`, the other problems, cache hits): the "
    "origins listed get `Access-Control-Allow-Origin`, and every answer that allows a page's "
    "origin exposes the rate-limit fields to its code."
), (
    Hand("allow_origins", "list of origins", required=True,
         example=["https://app.example.com", "https://*.preview.example.com"],
         doc='Origins as browsers send them, or `"*"`; `https://*.example.com` is any subdomain '
             "of it (not itself), with the same scheme and port."),
    Flag("allow_credentials", default=False, example=True,
         doc='Whether the answers allow credentials (cookies); not with `"*"`.'),
))

CONFIG = Table("the top level", (
    "The config file (`edge-limiter.toml`, or the `EDGE_LIMITER` var): the settings every route "
    "shares, then the routes. An invalid config is ONE error naming the route and field of "
    "every problem; warnings say what is legal but probably not meant."
), (
    Flag("shadow", default=False, example=True,
         doc="Every route counts and reports what it would block, and blocks nothing (for "
             "rolling out a config)."),
    Sub("storage", STORAGE, default_text="the defaults", example={}),
    Sub("deny_cache", DENY_CACHE, default_text="on", example={}),
    Sub("admin", ADMIN, default_text="the defaults", example={}),
    Sub("overrides", OVERRIDES, default_text="the defaults", example={}),
    Sub("logging", LOGGING, default_text="the defaults", example={}),
    Hand("origin", "URL", null_is_absent=True, default_text="none",
         example="https://api.example.com",
         doc="Where admitted requests of routes without their own go, and requests no route "
             "matches (forwarded unlimited). Without `origin` or `pool`, those get 404."),
    Hand("pool", "pool name", null_is_absent=True, default_text="none", example="regional",
         example_with={"origin": None}, doc="As `origin`, a pool of `[pools]` (one or the other)."),
    Sub("pools", POOL, many="map", null_is_absent=True, default_text="none",
        example={"regional": {"origins": [{"name": "eu", "url": "https://eu.example.com"}]}},
        doc="Named pools of origins."),
    Duration("origin_timeout", 1, MAX_ORIGIN_TIMEOUT_MS, default=DEFAULT_ORIGIN_TIMEOUT_MS,
             example="10s",
             doc="Every route's `timeout` default, and the timeout of unmatched requests."),
    Integer("store_timeout_ms", 1, MAX_STORE_TIMEOUT_MS, default=DEFAULT_STORE_TIMEOUT_MS,
            unit="ms", example=500,
            doc="The budget for one call to a key's Durable Object; past it the route's "
                "`on_store_error` decides."),
    Sub("paths", PATHS, default_text="the defaults", example={}),
    Choice("method_override", OVERRIDE_MODES, default="apply", example="refuse",
           doc="What a POST asking to be taken as another method (`X-HTTP-Method-Override`, "
               "`_method`, ...) gets: `apply` matches, counts and forwards it as that method; "
               "`refuse` answers `400`; `pass` forwards it as it came, counted as a POST (only "
               "for an origin that ignores overrides)."),
    Hand("client_ip_header", "header name", null_is_absent=True, default_text="unset",
         example="X-Forwarded-For",
         doc="A field the gateway sets on every forwarded request to the client's address, "
             "replacing whatever the client put there; unset, origins cannot tell clients apart "
             "by address."),
    Flag("forwarded_host", default=False, example=True,
         doc="Set `X-Forwarded-Host` and `X-Forwarded-Proto` on every forwarded request to the "
             "host and scheme the client asked for (replacing a client's copies)."),
    Hand("origin_headers", "table of field names", null_is_absent=True, default_text="none",
         example={"X-Gateway-Key": "$GATEWAY_KEY"},
         doc="Fields set on every request to an origin (each retry and health probe too), "
             'replacing a client\'s copy: a value as written, or `"$NAME"` for the Worker\'s '
             'secret `NAME` (`"$$..."` is a literal starting with `$`).'),
    Sub("cors", CORS, null_is_absent=True, default_text="none",
        example={"allow_origins": ["https://app.example.com"]}),
    Sub("auth", AUTH, many="map", null_is_absent=True, default_text="none",
        example={"main": {"issuer": "https://auth.example.com/", "algorithms": ["RS256"],
                          "jwks_url": "https://auth.example.com/.well-known/jwks.json"}},
        doc="Sources of JSON Web Tokens verified at the edge, by name (`[auth.NAME]`)."),
    Sub("tiers", TIERS, null_is_absent=True, default_text="none",
        example={"by": "jwt:plan", "default": "free",
                 "plans": {"free": "100/hour", "pro": "10000/hour"}}),
    Sub("routes", ROUTE, many="list", default_text="none",
        example=[{"name": "all", "match": {"path": "*"}, "limits": "100/minute"}],
        doc="The routes, in the order they are tried (`[[routes]]`)."),
))
# fmt: on


def parse_operations(got: Reader, problems: Problems) -> Operations:
    """The top-level operator settings: shadow, deny_cache, admin, overrides, logging."""
    shadow = got.flag("shadow")
    ttl, max_keys = _OPS.deny_cache_ttl_ms, _OPS.deny_cache_max_keys
    deny = got.sub("deny_cache")
    if deny is not None:
        if shadow and deny.raw:
            problems.warn(
                "config.deny_cache",
                "has no effect: with shadow = true nothing is denied, so nothing is cached",
            )
        enabled = deny.flag("enabled")
        ttl, max_keys = deny.ms("max_ttl"), deny.integer("max_keys")
        if not enabled and ("max_ttl" in deny.raw or "max_keys" in deny.raw):
            problems.warn(
                "config.deny_cache",
                "max_ttl and max_keys have no effect with enabled = false (no denial is "
                "remembered)",
            )
        ttl = ttl if enabled else 0
    admin = got.sub("admin")
    prefix = admin.text("prefix") if admin is not None else _OPS.admin_prefix
    overrides = got.sub("overrides")
    refresh = overrides.ms("refresh") if overrides is not None else _OPS.overrides_refresh_ms
    logging = got.sub("logging")
    sample, near = _OPS.sample_allowed, _OPS.near_limit
    every = _OPS.denials_every_ms
    if logging is not None:
        sample, near = logging.number("sample_allowed"), logging.number("near_limit")
        every = logging.ms("denials_every")
    storage = got.sub("storage")
    cleanup = storage.ms("cleanup_after") if storage is not None else _OPS.cleanup_after_ms
    return Operations(shadow, ttl, max_keys, prefix, refresh, sample, near, cleanup, every)


def parse_cors(raw: object, problems: Problems) -> CorsSettings | None:
    """The top-level ``cors`` table, or ``None`` when absent."""
    if raw is None:
        return None
    where = "config.cors"
    got = CORS.read(raw, where, problems)
    if got is None:
        return None
    credentials = got.flag("allow_credentials")
    listed = got.raw.get("allow_origins")
    if not isinstance(listed, list) or not listed:
        problems.add(
            f"{where}.allow_origins",
            "must be a list of origins like ['https://app.example.com'] (or ['*']), "
            f"got {shown(listed)}",
        )
        return None
    origins: set[str] = set()
    wildcards: list[tuple[str, str]] = []
    for index, item in enumerate(listed):
        problem = origin_problem(item)
        if problem is not None:
            problems.add(f"{where}.allow_origins[{index}]", problem)
            continue
        text = str(item).lower()
        scheme, sep, rest = text.partition("://*.")
        if sep:
            wildcards.append((scheme + "://", "." + rest))
        else:
            origins.add(text)
    if "*" in origins and credentials:
        problems.add(
            f"{where}.allow_credentials",
            "cannot be true with '*' in allow_origins: browsers refuse credentials for any "
            "origin; list the origins",
        )
    return CorsSettings(frozenset(origins), credentials, tuple(wildcards))


#: Fields that describe the message or the connection: never a place for the client's
#: address (and the platform would not forward some of them as set).
_NOT_CLIENT_IP_FIELDS = HOP_BY_HOP | {
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "cookie",
    "authorization",
    "forwarded",
}


def client_ip_header(value: object, problems: Problems) -> str | None:
    """``client_ip_header``: a field name such as ``"X-Forwarded-For"``, or absent."""
    if value is None:
        return None
    where = "config.client_ip_header"
    if not isinstance(value, str) or not is_token(value):
        problems.add(where, f"must be a header name such as 'X-Forwarded-For', got {shown(value)}")
        return None
    folded = value.lower()
    dashed = folded.replace("_", "-")  # CGI-style origins read the two spellings alike
    if dashed.startswith("cf-"):
        problems.add(
            where,
            f"{value!r} is a field the runtime owns (Cloudflare sets the CF- fields "
            "itself); name a field of your own, such as 'X-Forwarded-For' or 'X-Real-IP'",
        )
        return None
    if dashed in _NOT_CLIENT_IP_FIELDS or dashed in NOT_AN_ADDRESS or dashed in NEVER_SET:
        hint = (
            " ('forwarded' takes 'for=' syntax: use X-Forwarded-For)"
            if folded == "forwarded"
            else " (origins read another meaning from it)"
        )
        problems.add(where, f"{value!r} is not a field for the client's address{hint}")
        return None
    return folded
