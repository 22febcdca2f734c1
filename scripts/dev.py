"""``scripts/dev``: the gateway on localhost, in front of local demo origins.

Reads the example config from ``wrangler.toml`` (``[vars.EDGE_LIMITER]``), points every
origin it names at a demo origin on loopback (one per distinct origin URL), builds the
Worker and runs it on real local workerd with persisted Durable Object and KV state.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from build_worker import build  # noqa: E402
from demo_origin import DemoOrigin  # noqa: E402
from local_gateway import LocalGateway  # noqa: E402


def local_config(config: dict[str, Any], origins: dict[str, DemoOrigin]) -> dict[str, Any]:
    """``config`` with each origin URL replaced by its demo origin's loopback URL."""

    def demo_for(url: str) -> str:
        if url not in origins:
            origins[url] = DemoOrigin(name=url)
        return origins[url].url

    out = dict(config)
    if "origin" in out:
        out["origin"] = demo_for(out["origin"])
    routes = []
    for raw_route in out.get("routes", []):
        route = dict(raw_route)
        if "origin" in route:
            route["origin"] = demo_for(route["origin"])
        routes.append(route)
    out["routes"] = routes
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8787, help="gateway port (default 8787)")
    parser.add_argument("--config", default=str(ROOT / "wrangler.toml"), help="wrangler config")
    parser.add_argument("--fresh", action="store_true", help="forget persisted counters first")
    args = parser.parse_args()

    wrangler = tomllib.loads(Path(args.config).read_text())
    config = wrangler.get("vars", {}).get("EDGE_LIMITER")
    if not isinstance(config, dict):
        print(f"{args.config} has no [vars.EDGE_LIMITER] table", file=sys.stderr)
        return 2
    # EDGE_LIMITER_DEV_STATE lets tests keep their state out of the project's .local/.
    persist = Path(os.environ.get("EDGE_LIMITER_DEV_STATE") or ROOT / ".local" / "dev")
    if args.fresh:
        shutil.rmtree(persist, ignore_errors=True)
    worker_dir = ROOT / "build" / "worker"
    build(worker_dir)

    origins: dict[str, DemoOrigin] = {}
    vars_ = {"EDGE_LIMITER": local_config(config, origins)}
    gateway = LocalGateway(worker_dir, vars_, persist_dir=persist, port=args.port)
    try:
        gateway.start()
        url = gateway.url
        print(f"\nedge-limiter is running on {url} (local workerd, Pyodide 0.28.2)")
        for original, demo in origins.items():
            print(f"  origin {original} -> demo origin {demo.url}")
        print(f"  counters persist in {persist}/ (--fresh forgets them)\n")
        print("Try:")
        print(
            f"  curl -i -X POST {url}/v1/login            # 5/minute per IP (sliding_log); 6th is 429"
        )
        print(f"  curl -i -H 'x-api-key: k1' {url}/v1/search   # token bucket, burst 20, 10/s")
        print(f"  curl -i {url}/v1/tenants/acme/items         # gcra keyed on tenant + IP")
        print(f"  curl -i -X POST {url}/v1/reports          # cost 10 of 60/minute")
        print(f"  curl -i {url}/v1/catalog/shoes             # shadow: counted, never blocked")
        print(f"  curl -i {url}/health                       # no route: forwarded untouched")
        print(f'  curl -i -H \'MF-CF-Blob: {{"country":"DE","continent":"EU"}}\' {url}/v1/anything')
        print("\nCtrl-C stops the gateway and the demo origins.", flush=True)
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        print("\nstopping", file=sys.stderr)
    finally:
        gateway.stop()
        for origin in origins.values():
            origin.stop()
    return 0


def _interrupt(*_args: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
