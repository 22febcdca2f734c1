// Which Python a Worker gets, from its compatibility date and flags, as production picks it,
// and the npm Pyodide build the local host runs for it.
//
// workerd enables a Pyodide release per compatibility flag (each flag annotated with
// `$pythonSnapshotRelease` in compatibility-date.capnp) and "picks the flag with the highest
// ordinal value that is enabled" (api/pyodide/pyodide.c++). Two releases are hosted here:
// - python_workers_314 (set, or implied by python_workers from 2026-09-08 unless
//   no_python_workers_314): Pyodide 314.0.6, CPython 3.14.2;
// - python_workers_20250116 (set, or implied from 2025-09-29): Pyodide 0.28.2, CPython 3.13.2.
// Older dates give Pyodide 0.26 (Python 3.12), and the dated 3.14 previews
// (python_workers_20260610: 314.0.4) are other builds: the host refuses both rather than run
// a Python production would not.

import { existsSync, readFileSync } from "node:fs";
import path from "node:path";

export const PYTHON_314_DATE = "2026-09-08";
export const PYTHON_313_DATE = "2025-09-29";

/** The Pyodide builds production uses, and the npm package (package.json alias) of each. */
export const PYTHON_RUNTIMES = {
  "3.13": { npmPackage: "pyodide", pyodide: "0.28.2", python: "3.13.2", asm: "pyodide.asm.js" },
  "3.14": { npmPackage: "pyodide-314", pyodide: "314.0.6", python: "3.14.2", asm: "pyodide.asm.mjs" },
};

const HOSTED_RELEASE_FLAGS = new Set(["python_workers_20250116", "python_workers_314"]);

/** "3.13" or "3.14" for a Worker with this date and these flags; throws for any other Python. */
export function selectPython(compatibilityDate, compatibilityFlags) {
  const flags = new Set(compatibilityFlags);
  const otherReleases = [...flags].filter(
    (flag) => /^python_workers_(\d{8}|development)$/.test(flag) && !HOSTED_RELEASE_FLAGS.has(flag),
  );
  if (otherReleases.length > 0) {
    throw new Error(
      `compatibility flag ${otherReleases.join(", ")} selects a Pyodide build the local runtime ` +
        `does not host (it hosts python_workers_20250116 = Pyodide 0.28.2 and ` +
        `python_workers_314 = Pyodide 314.0.6)`,
    );
  }
  if (flags.has("python_workers_314")) {
    return "3.14";
  }
  if (compatibilityDate >= PYTHON_314_DATE && !flags.has("no_python_workers_314")) {
    return "3.14";
  }
  if (flags.has("python_workers_20250116") || compatibilityDate >= PYTHON_313_DATE) {
    return "3.13";
  }
  throw new Error(
    `compatibility date ${compatibilityDate} gives Python 3.12 (Pyodide 0.26), which the local ` +
      `runtime does not host: use a date from ${PYTHON_313_DATE} or the flag python_workers_20250116`,
  );
}

/**
 * The installed npm Pyodide for `version` ("3.13" | "3.14"): its directory and the facts the
 * host relies on, checked (the exact build production uses; the files the host imports).
 */
export function pythonRuntime(repo, version) {
  const expected = PYTHON_RUNTIMES[version];
  const dir = path.join(repo, "node_modules", expected.npmPackage);
  const manifest = path.join(dir, "package.json");
  if (!existsSync(manifest)) {
    throw new Error(
      `Python ${version} needs npm pyodide@${expected.pyodide} in node_modules/${expected.npmPackage} ` +
        `(package.json: "${expected.npmPackage}"); run scripts/bootstrap`,
    );
  }
  const installed = JSON.parse(readFileSync(manifest, "utf8")).version;
  if (installed !== expected.pyodide) {
    throw new Error(
      `node_modules/${expected.npmPackage} is Pyodide ${installed}, but production runs Python ` +
        `${version} on Pyodide ${expected.pyodide}; the host's boot recipe is checked on that ` +
        `build only (scripts/local_runtime/README.md)`,
    );
  }
  const lock = JSON.parse(readFileSync(path.join(dir, "pyodide-lock.json"), "utf8"));
  if (lock.info?.python !== expected.python) {
    throw new Error(
      `Pyodide ${installed}'s lock file says Python ${lock.info?.python}, expected ${expected.python}`,
    );
  }
  for (const name of [expected.asm, "pyodide.mjs", "pyodide.asm.wasm", "python_stdlib.zip"]) {
    if (!existsSync(path.join(dir, name))) {
      throw new Error(`Pyodide ${installed} has no ${name}, which the local host imports`);
    }
  }
  const [major, minor] = expected.python.split(".");
  return {
    version,
    dir,
    pyodide: installed,
    python: expected.python,
    asm: expected.asm,
    sitePackages: `/lib/python${major}.${minor}/site-packages`,
  };
}
