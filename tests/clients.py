"""Many requests in flight at once against a local runtime, without the client setting the pace.

One ``httpx.AsyncClient`` whose pool holds N connections spends more than twice the CPU per
request that N clients of one connection each do (httpcore's pool looks over every connection
and waiting request at each step), and each client made with the defaults loads the whole CA
bundle (about 20 ms). Measured against a bare Node server: 280 requests/s from one pool of 100
connections, 630/s from 100 clients of their own; in the 10,000-request load test the client,
not the runtime, was what took its time. Every test here speaks plain HTTP to loopback, so the
clients share one TLS context that is never used.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import httpx

T = TypeVar("T")

_TLS = ssl.create_default_context()


async def in_flight(
    calls: Sequence[Callable[[httpx.AsyncClient], Awaitable[T]]],
    senders: int | None = None,
    *,
    base_url: str = "",
    timeout: float = 60,
) -> list[T]:
    """Each call made with a client, ``senders`` at a time (all at once by default), each
    sender on a connection of its own; the results in the order of ``calls``. A call's
    exception ends the whole run, as with ``asyncio.gather``."""
    results: list[T | None] = [None] * len(calls)
    todo = iter(enumerate(calls))

    async def sender() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=timeout, verify=_TLS) as client:
            for n, call in todo:
                results[n] = await call(client)

    await asyncio.gather(*(sender() for _ in range(min(senders or len(calls), len(calls)))))
    return results  # type: ignore[return-value]  # every slot was filled
