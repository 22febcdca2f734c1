import { loadPyodide } from "pyodide";
const REPO = process.argv[2];
const pyodide = await loadPyodide();
pyodide.FS.mkdirTree("/repo");
pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: REPO }, "/repo");
const result = await pyodide.runPythonAsync(`
import sys, time, types, shutil, compileall, json
shutil.copytree("/repo/src", "/app", ignore=shutil.ignore_patterns("__pycache__"))
shutil.copytree("/repo/durable_objects", "/app/durable_objects", ignore=shutil.ignore_patterns("__pycache__"))
compileall.compile_dir("/app", quiet=1)
sys.path.insert(0, "/app")
import asyncio, json, http.client, datetime, logging, inspect, io, functools, contextlib, enum, random
import hashlib, hmac, secrets, dataclasses, calendar, http.cookies, locale, bisect, ipaddress, urllib.parse, copy, fnmatch, email.utils, math, re, string, struct, base64, uuid, traceback, os, operator, itertools, collections, typing, abc, heapq, zlib, binascii, unicodedata, textwrap, tomllib, decimal
w = types.ModuleType("workers")
class _X: pass
for n in ("WorkerEntrypoint","DurableObject","Response","Request"):
    setattr(w, n, _X)
sys.modules["workers"] = w
before = set(sys.modules)
import _lsprof
prof = "${process.argv[3] || ""}" == "prof"
if prof:
    pr = _lsprof.Profiler(); pr.enable()
t = time.perf_counter()
import entry
total = time.perf_counter() - t
out = {"total_ms": total*1000, "stdlib_new": sorted(m for m in set(sys.modules) - before if not m.startswith(("edge_limiter","durable_objects","entry")))}
if prof:
    pr.disable()
    st = sorted(((e.totaltime, e.inlinetime, e.callcount, str(e.code)[:110]) for e in pr.getstats()), key=lambda x: -x[1])[:30]
    out["prof"] = [f"{a*1000:.1f} {b*1000:.1f} {n} {c}" for a,b,n,c in st]
json.dumps(out)
`);
process.stdout.write(`${result}\n`);
