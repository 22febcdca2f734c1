"""Resilience towards origins: breaker, backoff, retry budget, bulkhead, retry settings.

==============  ==============================================================
``breaker``     closed / open / half-open per origin, as plain, storable data
``backoff``     exponential backoff with full jitter; ``Retry-After`` parsing
``budget``      retries at most a share of recent requests, plus a small floor
``bulkhead``    a per-isolate cap on calls in flight
``retry``       retry settings and which requests are safe to retry
==============  ==============================================================

Like the rest of the core: pure, standard library only, time passed in as integer ms and
randomness as a callable.
"""

from __future__ import annotations
