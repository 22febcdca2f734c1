"""The schema of a route's ``idempotency`` table, and its parser.

``idempotency = { mode = "required", retention = "24h", lock_timeout = "60s" }``: every
field is optional. A bad field is reported and takes its default, so the rest of the
route is still checked in the same pass.
"""

from __future__ import annotations

from ..idempotency.fingerprint import ALWAYS_FINGERPRINTED
from ..idempotency.settings import (
    DEFAULT_LOCK_TIMEOUT_MS,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_METHODS,
    DEFAULT_MODE,
    DEFAULT_RETENTION_MS,
    MAX_BODY_BYTES,
    MAX_LOCK_TIMEOUT_MS,
    MAX_REQUEST_BYTES,
    MAX_RETENTION_MS,
    MIN_LOCK_TIMEOUT_MS,
    MIN_RETENTION_MS,
    MODES,
    NEVER_WORTH_FINGERPRINTING,
    SAFE_METHODS,
    IdempotencySettings,
)
from ..validation import Problems
from .fields import Choice, Duration, Flag, Names, Size
from .table import Table


def _method_advice(name: str) -> str | None:
    return f"{name} is a safe method: a key protects nothing" if name in SAFE_METHODS else None


def _header_advice(name: str) -> str | None:
    if name in ALWAYS_FINGERPRINTED:
        return f"{name} is part of every fingerprint already"
    return NEVER_WORTH_FINGERPRINTING.get(name)


# fmt: off
IDEMPOTENCY = Table("idempotency", (
    "Honour `Idempotency-Key` on the route's unsafe methods: the first request with a key is "
    "forwarded and its answer kept; a retry with the same key and the same request gets that "
    "answer again (`Idempotent-Replayed: true`), one with another request a `422`, one while "
    "the first is still at the origin a `409`."
), (
    Choice("mode", MODES, default=DEFAULT_MODE, rule="'required' or 'optional'", suggest=False,
           example="required",
           doc='`"required"`: a request without the header gets `400`; `"optional"`: it passes '
               "through unprotected."),
    Duration("retention", MIN_RETENTION_MS, MAX_RETENTION_MS, default=DEFAULT_RETENTION_MS,
             example="24h", doc="How long a completed answer is replayed for its key."),
    Duration("lock_timeout", MIN_LOCK_TIMEOUT_MS, MAX_LOCK_TIMEOUT_MS,
             default=DEFAULT_LOCK_TIMEOUT_MS, example="2m",
             doc="How long a claim holds off duplicates while its request is at the origin; "
                 "keep it above the route's `timeout` (else a warning): a holder whose lock ran "
                 "out cannot store its answer."),
    Names("fingerprint_headers", "header name", advice=_header_advice, default=(),
          default_text="none", example=["x-account"],
          doc='Request fields that are part of "the same request" besides method, path, query, '
              "body, `Content-Type` and the caller's fields (`Authorization`, `Cookie`, "
              "`Proxy-Authorization` and every header any route keys on; read lower-case)."),
    Names("methods", "method", advice=_method_advice, at_least_one=True,
          default=DEFAULT_METHODS, example=["POST", "PUT"],
          doc="The methods the key applies to (read upper-case; a safe method draws a "
              "warning). A protected POST that a method override makes another method stays "
              "protected, on a route whose `match` takes that method."),
    Flag("store_5xx", default=True, example=False,
         doc="Whether a 5xx answer (and the gateway's own `502`/`504` after an attempt that got "
             "none) is kept for replay, Stripe's way: the origin may have acted. `false` gives "
             "the key back so the retry is forwarded. An answer saying the origin did not act "
             "(408, 425, 429, 503, 521-526 but 524) is never kept."),
    Size("max_bytes", 1, MAX_BODY_BYTES, default=DEFAULT_MAX_BYTES, example=65536,
         doc="Larger answer bodies are not kept: the record says the answer was too large, "
             "without its body (a record lives in one Durable Object row)."),
    Size("max_request_bytes", 1, MAX_REQUEST_BYTES, default=DEFAULT_MAX_REQUEST_BYTES,
         example=1048576,
         doc="Larger request bodies get `413` (`request_too_large`) and are not forwarded: a "
             "body is read whole to fingerprint it."),
))
# fmt: on


def parse_idempotency(raw: object, where: str, problems: Problems) -> IdempotencySettings | None:
    """The settings in ``raw`` (a route's ``idempotency`` table), or ``None`` when absent.

    ``where`` names the table in problems, e.g. ``"route 'payments'.idempotency"``.
    """
    got = None if raw is None else IDEMPOTENCY.read(raw, where, problems)
    if got is None:
        return None
    return IdempotencySettings(**got.settings())
