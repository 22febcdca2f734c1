// The npm Pyodide stdlib zip holds only .py sources, so every boot compiles each module
// Python imports while it starts (measured: most of a 4.6 s boot in workerd). This module adds
// bytecode to it once per machine: it runs the same npm Pyodide in Node, compiles every source
// to an unchecked hash-based .pyc next to it (zipimport prefers the .pyc and, unchecked, never
// compares it with the source; the sources stay for tracebacks), and caches the result under
// node_modules/.cache keyed by the Pyodide version and the stdlib's hash.
// Same Pyodide build in Node and in workerd, so the same interpreter and bytecode magic.

import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const COMPILE = `
import importlib.util
import sys
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc

def compile_stdlib(source_path, target_path):
    prefix = f"/lib/python{sys.version_info[0]}{sys.version_info[1]}.zip/"
    with zipfile.ZipFile(source_path) as source, zipfile.ZipFile(target_path, "w") as target:
        for info in source.infolist():
            data = source.read(info.filename)
            target.writestr(info.filename, data)
            if info.filename.endswith(".py"):
                code = compile(data, prefix + info.filename, "exec", dont_inherit=True)
                pyc = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)
                target.writestr(info.filename + "c", pyc)

def compile_tree(source_path, target_path, root):
    # A zip that is unpacked under root and imported from files: the bytecode goes where the
    # file importer looks for it, __pycache__/<name>.<tag>.pyc.
    with zipfile.ZipFile(source_path) as source, zipfile.ZipFile(target_path, "w") as target:
        for info in source.infolist():
            data = source.read(info.filename)
            target.writestr(info.filename, data)
            if info.filename.endswith(".py"):
                code = compile(data, root + "/" + info.filename, "exec", dont_inherit=True)
                pyc = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)
                target.writestr(importlib.util.cache_from_source(info.filename), pyc)
`;

/**
 * The Pyodide stdlib zip with compiled bytecode added, built on first use and cached.
 * Falls back to the plain zip (slower boots) if building fails.
 */
export async function compiledStdlib(pyodideDir, cacheDir, log) {
  const source = readFileSync(path.join(pyodideDir, "python_stdlib.zip"));
  const { version } = JSON.parse(readFileSync(path.join(pyodideDir, "package.json"), "utf8"));
  const key = createHash("sha256").update(source).digest("hex").slice(0, 16);
  const cached = path.join(cacheDir, `python_stdlib-${version}-${key}-pyc.zip`);
  if (existsSync(cached)) {
    return readFileSync(cached);
  }
  try {
    const started = performance.now();
    const { loadPyodide } = await import(pathToFileURL(path.join(pyodideDir, "pyodide.mjs")).href);
    const pyodide = await loadPyodide({
      indexURL: `${pyodideDir}${path.sep}`,
      stdout: log,
      stderr: log,
    });
    pyodide.FS.writeFile("/tmp/stdlib-source.zip", source);
    const namespace = pyodide.toPy({});
    pyodide.runPython(COMPILE, { globals: namespace });
    namespace.get("compile_stdlib")("/tmp/stdlib-source.zip", "/tmp/stdlib-pyc.zip");
    const compiled = Buffer.from(pyodide.FS.readFile("/tmp/stdlib-pyc.zip"));
    mkdirSync(cacheDir, { recursive: true });
    // Another launch may build the same file at the same time: write aside, rename atomically.
    const partial = `${cached}.${process.pid}.partial`;
    writeFileSync(partial, compiled);
    renameSync(partial, cached);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    log(`compiled the Python stdlib to bytecode in ${seconds} s (cached in ${cached})`);
    return compiled;
  } catch (error) {
    log(`could not compile the Python stdlib, booting from sources: ${error?.stack ?? error}`);
    return source;
  }
}

let nodePyodide;

/**
 * ``zipBytes`` (a zip the host unpacks under ``root`` and imports from files) with compiled
 * bytecode added beside each source, built once per content and cached like the stdlib's.
 * Production imports a Worker's modules once, into the snapshot it deploys; compiling them
 * at every local boot would make the local start-up slower than production's for no reason.
 * Falls back to the plain zip if building fails.
 */
export async function compiledTree(pyodideDir, cacheDir, zipBytes, root, label, log) {
  const { version } = JSON.parse(readFileSync(path.join(pyodideDir, "package.json"), "utf8"));
  const key = createHash("sha256").update(zipBytes).update(root).digest("hex").slice(0, 16);
  const cached = path.join(cacheDir, `${label}-${version}-${key}-pyc.zip`);
  if (existsSync(cached)) {
    return readFileSync(cached);
  }
  try {
    const { loadPyodide } = await import(pathToFileURL(path.join(pyodideDir, "pyodide.mjs")).href);
    nodePyodide ??= await loadPyodide({ indexURL: `${pyodideDir}${path.sep}`, stdout: log, stderr: log });
    nodePyodide.FS.writeFile("/tmp/tree-source.zip", zipBytes);
    const namespace = nodePyodide.toPy({});
    nodePyodide.runPython(COMPILE, { globals: namespace });
    namespace.get("compile_tree")("/tmp/tree-source.zip", "/tmp/tree-pyc.zip", root);
    const compiled = Buffer.from(nodePyodide.FS.readFile("/tmp/tree-pyc.zip"));
    mkdirSync(cacheDir, { recursive: true });
    const partial = `${cached}.${process.pid}.partial`;
    writeFileSync(partial, compiled);
    renameSync(partial, cached);
    return compiled;
  } catch (error) {
    log(`could not compile ${label} to bytecode, booting from sources: ${error?.stack ?? error}`);
    return zipBytes;
  }
}
