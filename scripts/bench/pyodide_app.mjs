// The Worker's Python on npm Pyodide (the version production runs) in Node, without workerd:
// shared by the profiles in this directory and the adapter's tests.
import path from "node:path";
import { fileURLToPath } from "node:url";
// EDGE_LIMITER_PYTHON=3.14: Pyodide 314.0.6 (npm alias pyodide-314); else 0.28.2 (Python 3.13).
const { loadPyodide } = await import(
  process.env.EDGE_LIMITER_PYTHON === "3.14" ? "pyodide-314" : "pyodide"
);

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

/**
 * Pyodide with src/ (less the tools, edge_limiter/tools/) and durable_objects/ copied into
 * its memory file system as /app, compiled to bytecode (as the local host serves them) and on sys.path, and an empty
 * stand-in `workers` module for the SDK (its classes only, nothing runs through it).
 * `stdout` (optional) receives what Python prints.
 */
export async function loadWorkerApp({ stdout } = {}) {
  const pyodide = await loadPyodide(stdout ? { stdout } : {});
  pyodide.FS.mkdirTree("/repo");
  pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: REPO }, "/repo");
  await pyodide.runPythonAsync(`
import compileall, shutil, sys, types

skip = shutil.ignore_patterns("__pycache__")
# The project's tools (edge_limiter/tools) are never uploaded, so never loaded here either.
def worker_only(folder, names):
    return [*skip(folder, names), *(["tools"] if folder.endswith("/edge_limiter") else [])]

shutil.copytree("/repo/src", "/app", ignore=worker_only)
shutil.copytree("/repo/durable_objects", "/app/durable_objects", ignore=skip)
compileall.compile_dir("/app", quiet=1)
sys.path.insert(0, "/app")
workers = types.ModuleType("workers")
for name in ("DurableObject", "Request", "Response", "WorkerEntrypoint"):
    setattr(workers, name, type(name, (), {}))
sys.modules["workers"] = workers
`);
  return pyodide;
}
