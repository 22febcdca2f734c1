"""The idempotency table's parser: defaults, every field, and problems that name their field."""

from __future__ import annotations

import pytest

from edge_limiter.core.config.idempotency import parse_idempotency
from edge_limiter.core.idempotency.settings import IdempotencySettings
from edge_limiter.core.validation import Problems

WHERE = "route 'payments'.idempotency"


def parse(raw: object) -> tuple[IdempotencySettings | None, Problems]:
    problems = Problems()
    return parse_idempotency(raw, WHERE, problems), problems


def test_absent_table_means_no_idempotency() -> None:
    settings, problems = parse(None)
    assert settings is None
    assert not problems.items


def test_empty_table_takes_every_default() -> None:
    settings, problems = parse({})
    assert not problems.items and not problems.warnings
    assert settings == IdempotencySettings()
    assert settings.mode == "optional" and not settings.required
    assert settings.retention_ms == 86_400_000
    assert settings.lock_timeout_ms == 60_000
    assert settings.fingerprint_headers == ()
    assert settings.methods == ("PATCH", "POST")
    assert settings.store_5xx is True  # Stripe's way: the origin may have acted
    assert settings.max_bytes == 1024 * 1024
    assert settings.max_request_bytes == 4 * 1024 * 1024


def test_the_documented_example() -> None:
    settings, problems = parse(
        {
            "mode": "required",
            "retention": "24h",
            "lock_timeout": "60s",
            "fingerprint_headers": ["Content-Type", "x-tenant"],
            "methods": ["post", "PUT", "DELETE", "LINK"],
            "store_5xx": True,
            "max_bytes": 65536,
            "max_request_bytes": 10_000_000,
        }
    )
    assert not problems.items
    assert settings == IdempotencySettings(
        mode="required",
        fingerprint_headers=("content-type", "x-tenant"),
        methods=("DELETE", "LINK", "POST", "PUT"),
        store_5xx=True,
        max_bytes=65536,
        max_request_bytes=10_000_000,
    )
    assert settings.required
    assert settings.applies_to("post") and not settings.applies_to("PATCH")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mode", "always"),
        ("mode", True),
        ("retention", "500ms"),
        ("retention", "31d"),
        ("retention", 3600),
        ("lock_timeout", "500ms"),
        ("lock_timeout", "1h"),
        ("fingerprint_headers", "content-type"),
        ("fingerprint_headers", ["content type"]),
        ("fingerprint_headers", ["x:y"]),
        ("fingerprint_headers", [""]),
        ("fingerprint_headers", ["x-tenant\n"]),
        ("fingerprint_headers", [1]),
        ("methods", []),
        ("methods", "POST"),
        ("methods", ["PO ST"]),
        ("methods", ["POST", "GET("]),
        ("store_5xx", "yes"),
        ("max_bytes", 0),
        ("max_bytes", 2 * 1024 * 1024),
        ("max_request_bytes", 0),
        ("max_request_bytes", 33 * 1024 * 1024),
        ("max_request_bytes", "4MB"),
    ],
)
def test_bad_field_is_a_problem_naming_it(field: str, value: object) -> None:
    settings, problems = parse({field: value})
    assert settings is not None
    assert len(problems.items) == 1, problems.items
    assert problems.items[0].startswith(f"{WHERE}.{field}")


def test_bad_fields_take_their_defaults() -> None:
    settings, problems = parse({"mode": "x", "methods": [], "max_bytes": -1, "retention": "999ms"})
    assert len(problems.items) == 4
    assert settings == IdempotencySettings()


def test_unknown_fields_and_non_tables() -> None:
    _, problems = parse({"ttl": "24h"})
    assert problems.items[0].startswith(f"{WHERE}.ttl: unknown field")
    settings, problems = parse(["POST"])
    assert settings is None and problems.items[0].startswith(f"{WHERE}: must be a table")


def test_safe_methods_and_repeats_are_warned_about() -> None:
    settings, problems = parse({"methods": ["POST", "post", "GET"]})
    assert not problems.items
    assert settings is not None and settings.methods == ("GET", "POST")
    assert len(problems.warnings) == 2


def test_5xx_is_stored_unless_released() -> None:
    assert IdempotencySettings().stores_status(200)
    assert IdempotencySettings().stores_status(422)
    assert IdempotencySettings().stores_status(500)
    assert not IdempotencySettings(store_5xx=False).stores_status(500)


@pytest.mark.parametrize("status", [408, 425, 429, 503, 521, 522, 523, 525, 526])
def test_an_answer_saying_the_request_was_not_processed_is_never_stored(status: int) -> None:
    assert not IdempotencySettings().stores_status(status)
    assert not IdempotencySettings(store_5xx=True).stores_status(status)
