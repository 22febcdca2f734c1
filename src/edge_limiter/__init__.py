"""edge-limiter: a rate-limiting API gateway for Cloudflare Python Workers.

``edge_limiter.core`` is the pure decision core (standard library only, time is an
argument); the other modules are the thin adapters that run inside the Worker.
"""

from __future__ import annotations

__version__ = "0.1.0"
