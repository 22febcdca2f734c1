import { loadPyodide } from "pyodide";
const pyodide = await loadPyodide();
const result = await pyodide.runPythonAsync(`
import asyncio, json, http.client, datetime, logging, inspect, io, functools, contextlib, enum, random, sys
import _lsprof, time
pr = _lsprof.Profiler(); pr.enable()
t = time.perf_counter()
import dataclasses
dt = time.perf_counter() - t
pr.disable()
st = sorted(((e.totaltime, e.inlinetime, str(e.code)[:100]) for e in pr.getstats()), reverse=True)[:25]
str(dt*1000) + "\\n" + "\\n".join(f"{a*1000:.1f} {b*1000:.1f} {c}" for a,b,c in st)
`);
process.stdout.write(`${result}\n`);
