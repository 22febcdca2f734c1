// Where importing the Worker goes on npm Pyodide (the version production runs), in Node.
//
//   node scripts/bench/pyodide_imports.mjs [--profile]
//
// The Worker's modules as pyodide_app.mjs loads them (compiled to bytecode, as the local
// host serves them); every stdlib module the Worker uses is imported first (the local host
// serves the stdlib compiled too, so only executing them would count), then `import entry`
// is timed.
// Prints one JSON line: the import's ms, the ms spent building dataclasses (and how many),
// the stdlib modules the import still pulled in, and with --profile the functions that
// took the most time of their own.
import { loadWorkerApp } from "./pyodide_app.mjs";

const pyodide = await loadWorkerApp();
pyodide.globals.set("profile", process.argv.includes("--profile"));
const result = await pyodide.runPythonAsync(`
import json, sys, time

# What the SDK imports, then what the Worker's modules import from the stdlib.
import asyncio, contextlib, datetime, enum, functools, http.client, inspect, io, logging, random
import base64, bisect, collections, copy, dataclasses, email.utils, fnmatch, hashlib, heapq
import hmac, ipaddress, itertools, math, operator, os, re, secrets, string, struct
import traceback, typing, urllib.parse

spent = [0.0, 0]
process_class = dataclasses._process_class

def timed_process_class(*args, **kwargs):
    started = time.perf_counter()
    try:
        return process_class(*args, **kwargs)
    finally:
        spent[0] += time.perf_counter() - started
        spent[1] += 1

dataclasses._process_class = timed_process_class
before = set(sys.modules)
if profile:
    import _lsprof
    profiler = _lsprof.Profiler()
    profiler.enable()
started = time.perf_counter()
import entry
import_ms = (time.perf_counter() - started) * 1000
ours = ("edge_limiter", "durable_objects", "entry", "js", "_lsprof")
out = {
    "import_ms": round(import_ms, 1),
    "dataclasses_ms": round(spent[0] * 1000, 1),
    "dataclasses": spent[1],
    "stdlib_pulled_in": sorted(m for m in set(sys.modules) - before if not m.startswith(ours)),
}
if profile:
    profiler.disable()
    stats = sorted(profiler.getstats(), key=lambda entry: -entry.inlinetime)[:25]
    out["own_time"] = [
        f"{s.inlinetime * 1000:7.1f} ms own {s.totaltime * 1000:7.1f} ms total {s.callcount:5d} calls {str(s.code)[:90]}"
        for s in stats
    ]
json.dumps(out)
`);
process.stdout.write(`${result}\n`);
