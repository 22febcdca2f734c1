import { loadPyodide } from "pyodide";
const pyodide = await loadPyodide();
const mods = process.argv.slice(2);
const result = await pyodide.runPythonAsync(`
import sys, time, json
import asyncio, json, http.client, datetime, logging, inspect, io, functools, contextlib, enum, random
out = []
for m in ${JSON.stringify(mods)}:
    before = set(sys.modules)
    t = time.perf_counter(); __import__(m); dt = time.perf_counter() - t
    out.append((m, round(dt*1000, 1), sorted(set(sys.modules) - before)))
json.dumps(out)
`);
process.stdout.write(`${result}\n`);
