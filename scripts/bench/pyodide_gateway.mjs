// The gateway's own work per request on npm Pyodide (the version production runs), in Node:
// the real Worker entry (`handle_fetch`) with real JavaScript Request/Response/Headers
// objects (Node's), a `fetch` that answers at once, and for limited routes a Durable Object
// namespace whose `decide` runs the real KeyStore (no SQL) in the same Pyodide. No workerd,
// no network: what is left is the gateway's Python and its calls into JavaScript, against a
// bare forward (one `fetch` of the runtime's own request, as a minimal Python Worker does).
//
//   node scripts/bench/pyodide_gateway.mjs [--requests N] [--rounds R] [--profile PATH]
//
// Prints one JSON line: for each path ("bare forward", "unmatched", "limited", "denied") the
// minimum and the median over the rounds of the mean us per request (the minimum is the
// figure least disturbed by the machine), and the status and fields of each path's second
// answer.
// --profile PATH prints instead the 40 functions with the most time of their own for PATH.
import { loadWorkerApp } from "./pyodide_app.mjs";

const option = (name, fallback) => {
  const index = process.argv.indexOf(name);
  return index === -1 ? fallback : process.argv[index + 1];
};

// workerd's JavaScript has Promise.withResolvers (a request's hold uses it); Node 20's has not.
Promise.withResolvers ??= function withResolvers() {
  let resolve;
  let reject;
  const promise = new Promise((ok, fail) => {
    resolve = ok;
    reject = fail;
  });
  return { promise, resolve, reject };
};

// The origin: answers at once, as a fast keep-alive origin would.
globalThis.fetch = async () =>
  new Response("ok", { status: 200, headers: { "content-type": "text/plain" } });

// The gateway's log lines (every denial is logged) are written, then dropped: stdout is
// for the result.
const pyodide = await loadWorkerApp({ stdout: () => {} });
pyodide.globals.set("requests", Number(option("--requests", "2000")));
pyodide.globals.set("rounds", Number(option("--rounds", "12")));
pyodide.globals.set("profile_path", option("--profile", ""));
const result = await pyodide.runPythonAsync(`
import json, statistics, time, types

import js
from pyodide.ffi import create_proxy, to_js

from edge_limiter.core.ratelimit.keystore import KeyStore
from edge_limiter.platform.worker import handle_fetch

config = {
    "origin": "http://127.0.0.1:9",
    "routes": [
        {
            "name": "bench",
            "match": {"path": "/limited/*"},
            "limits": "1000000/hour",
            "algorithm": "gcra",
            "key": "header:x-bench-key",
        },
        {
            "name": "small",
            "match": {"path": "/small/*"},
            "limits": "1/hour",
            "algorithm": "gcra",
            "key": "header:x-bench-key",
        },
    ],
}


class NoSql:
    def run(self, query, *args):
        pass

    def rows(self, query, *args):
        return []


stubs = {}


def stub_for(name):
    stub = stubs.get(name)
    if stub is None:
        store = KeyStore(NoSql())
        stub = stubs[name] = js.Object.new()
        stub.decide = create_proxy(
            lambda payload: js.Promise.resolve(store.decide(str(payload), int(time.time() * 1000)))
        )
    return stub


namespace = js.Object.new()
namespace.getByName = create_proxy(stub_for)
env = types.SimpleNamespace(EDGE_LIMITER=json.dumps(config), RATE_LIMITER=namespace)
ctx = js.Object.new()
ctx.waitUntil = create_proxy(lambda promise: None)
fields = to_js(
    [["accept", "*/*"], ["x-bench-key", "hot"], ["cf-connecting-ip", "198.51.100.7"]]
)


def request(path):
    init = js.Object.new()
    init.headers = fields
    return js.Request.new("http://gateway.example" + path, init)


async def bare(incoming):
    init = js.Object.new()
    init.redirect = "manual"
    return await js.fetch(js.Request.new("http://127.0.0.1:9/x", incoming), init)


async def gateway(incoming):
    return await handle_fetch(incoming, env, ctx)


paths = {
    "bare forward": (bare, "/x"),
    "unmatched": (gateway, "/unmatched/x"),
    "limited": (gateway, "/limited/x"),
    "denied": (gateway, "/small/x"),  # after its first request, from the deny cache
}


async def answer(handler, path):
    response = await handler(request(path))
    return [response.status, sorted(str(k) for k in js.Array.from_(response.headers.keys()))]


async def timed(handler, path):
    batch = [request(path) for _ in range(requests)]
    started = time.perf_counter()
    for incoming in batch:
        await handler(incoming)
    return (time.perf_counter() - started) / requests * 1e6


async def main():
    out = {}
    for name, (handler, path) in paths.items():
        await answer(handler, path)  # the second answer is the steady state's (a denial)
        out[name] = {"answer": await answer(handler, path)}
        for _ in range(min(300, requests)):  # warm up
            await handler(request(path))
    if profile_path:
        import _lsprof

        handler, path = next(v for v in paths.values() if v[1] == profile_path)
        profiler = _lsprof.Profiler()
        profiler.enable()
        for _ in range(requests):
            await handler(request(path))
        profiler.disable()
        stats = sorted(profiler.getstats(), key=lambda entry: -entry.inlinetime)[:40]
        return json.dumps([
            f"{s.inlinetime / requests * 1e6:7.1f} us own {s.totaltime / requests * 1e6:8.1f} us"
            f" total {s.callcount / requests:5.2f}/request {str(s.code)[:90]}"
            for s in stats
        ])
    samples = {name: [] for name in paths}
    for _ in range(rounds):  # the paths in turn, so a slow stretch hits them all
        for name, (handler, path) in paths.items():
            samples[name].append(await timed(handler, path))
    for name, values in samples.items():
        out[name]["min_us"] = round(min(values), 1)
        out[name]["median_us"] = round(statistics.median(values), 1)
    return json.dumps(out)


await main()
`);
process.stdout.write(`${result}\n`);
