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
w = types.ModuleType("workers")
class _X: pass
for n in ("WorkerEntrypoint","DurableObject","Response","Request"):
    setattr(w, n, _X)
sys.modules["workers"] = w
import importlib.abc, importlib.machinery
times = {}
class Timer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for f in sys.meta_path:
            if f is self: continue
            spec = f.find_spec(name, path, target) if hasattr(f, "find_spec") else None
            if spec is not None:
                loader = spec.loader
                orig = loader.exec_module
                def exec_module(module, orig=orig, name=name):
                    t = time.perf_counter(); orig(module); times[name] = time.perf_counter() - t
                loader.exec_module = exec_module
                return spec
        return None
import dataclasses
_dc = [0.0, 0]
_orig = dataclasses._process_class
def _pc(*a, **k):
    t = time.perf_counter(); r = _orig(*a, **k); _dc[0] += time.perf_counter() - t; _dc[1] += 1; return r
dataclasses._process_class = _pc
if "${process.argv[3] || ""}" == "timed":
    sys.meta_path.insert(0, Timer())
before = set(sys.modules)
t = time.perf_counter()
import entry
total = time.perf_counter() - t
new = sorted(set(sys.modules) - before)
json.dumps({"dc_ms": _dc[0]*1000, "dc_n": _dc[1], "total_ms": total*1000, "n": len(new), "stdlib": [m for m in new if not m.startswith(("edge_limiter","durable_objects","entry"))], "top": sorted(((round(v*1000,1),k) for k,v in times.items()), reverse=True)[:40]})
`);
process.stdout.write(`${result}\n`);
