"""Fixture Worker for the local runtime's own tests: one route per runtime feature."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs, urlparse

from durable_objects.counter import Counter
from workers import Response, WorkerEntrypoint, fetch

__all__ = ["Counter", "Default"]

DO_TIMEOUT_S = 0.5


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status=status, headers={"content-type": "application/json"})


def _plain(value: Any) -> Any:
    return value.to_py() if hasattr(value, "to_py") else value


class Default(WorkerEntrypoint):
    async def fetch(self, request: Any) -> Response:
        url = urlparse(request.url)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        parts = [part for part in url.path.split("/") if part]
        method = request.method

        if parts == ["health"]:
            return Response("ok")
        if parts == ["whoami"]:
            cf = request.cf
            return _json(
                {
                    "country": getattr(cf, "country", None),
                    "continent": getattr(cf, "continent", None),
                    "ip": request.headers.get("cf-connecting-ip"),
                }
            )
        if parts == ["log"]:
            print(f"fixture-log {query.get('msg', '')}")
            return Response("logged")
        if parts == ["boom"]:
            raise RuntimeError("fixture-boom")
        if parts == ["vars"]:
            return _json({"FIXTURE_CONFIG": _plain(self.env.FIXTURE_CONFIG)})
        if len(parts) == 2 and parts[0] == "kv":
            return await self._kv(method, parts[1], request)
        if parts == ["proxy"]:
            upstream = await fetch(query["url"])
            return Response(
                await upstream.text(),
                status=upstream.status,
                headers={"x-upstream-status": str(upstream.status)},
            )
        if len(parts) >= 2 and parts[0] == "counter":
            return await self._counter(method, parts[1], parts[2:], query)
        return Response("not found", status=404)

    async def _kv(self, method: str, key: str, request: Any) -> Response:
        if method == "PUT":
            await self.env.CACHE.put(key, await request.text())
            return Response("stored", status=201)
        value = await self.env.CACHE.get(key)
        if value is None:
            return Response("missing", status=404)
        return Response(value)

    async def _counter(
        self, method: str, name: str, rest: list[str], query: dict[str, str]
    ) -> Response:
        stub = getattr(self.env, query.get("binding", "COUNTER")).getByName(name)
        try:
            if method == "POST" and rest == ["increment"]:
                call = stub.increment(json.dumps({"by": int(query.get("by", "1"))}))
            elif method == "POST" and rest == ["alarm"]:
                call = stub.schedule_alarm(int(query.get("delay_ms", "50")))
            elif method == "GET" and rest == ["do-fetch"]:
                response = await asyncio.wait_for(
                    stub.fetch("https://counter.internal/ping"), DO_TIMEOUT_S
                )
                return Response(await response.text())
            elif method == "GET" and not rest:
                call = stub.read()
            else:
                return Response("not found", status=404)
            return _json(json.loads(await asyncio.wait_for(call, DO_TIMEOUT_S)))
        except TimeoutError:
            return _json({"error": "timeout"}, status=504)
        except Exception as exc:
            return _json({"error": type(exc).__name__, "message": str(exc)}, status=503)
