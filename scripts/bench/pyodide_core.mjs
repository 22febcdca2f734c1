// Runs edge_limiter.tools.bench.core_bench on npm Pyodide (the version production runs) in Node, with
// the project's source mounted read-only, and prints its JSON line.
//
//   node scripts/bench/pyodide_core.mjs [core_bench arguments]
import path from "node:path";
import { fileURLToPath } from "node:url";
// EDGE_LIMITER_PYTHON=3.14: Pyodide 314.0.6 (npm alias pyodide-314); else 0.28.2 (Python 3.13).
const { loadPyodide } = await import(
  process.env.EDGE_LIMITER_PYTHON === "3.14" ? "pyodide-314" : "pyodide"
);

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const pyodide = await loadPyodide();
pyodide.FS.mkdirTree("/repo");
pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: REPO }, "/repo");
pyodide.globals.set("bench_args", pyodide.toPy(process.argv.slice(2)));
const result = await pyodide.runPythonAsync(`
import json, sys
sys.path.insert(0, "/repo/src")
from edge_limiter.tools.bench import core_bench
json.dumps(core_bench.main(list(bench_args)))
`);
process.stdout.write(`${result}\n`);
