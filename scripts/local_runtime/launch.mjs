#!/usr/bin/env node
// Runs the project's Python Worker on real local workerd through the Miniflare API.
//
//   node scripts/local_runtime/launch.mjs SPEC.json
//
// SPEC.json fields (only workerDir is required):
//   workerDir            built Python Worker dir: <mainModule>.py plus its packages
//   mainModule           "entry"               the main module's name, without ".py"
//   host                 "127.0.0.1"
//   port                 0                     0 picks a free port
//   persistDir           (none)                Durable Object (SQLite) and KV state live under
//                                              it; omitted: in memory, gone on exit
//   vars                 {}                    env vars; objects become JSON bindings
//   durableObjects       {"RATE_LIMITER": "RateLimiter"}   binding name -> Python class name
//   kvNamespaces         ["CACHE"]
//   analyticsEngineDatasets {}                 binding -> {dataset}
//   recordAnalytics      false                 TEST ONLY: print every data point written to
//                                              stderr as `ANALYTICS {json}`
//   compatibilityDate    REQUIRED              the Worker's date (wrangler.toml's); no default, so
//                                              the local runtime never silently differs
//   compatibilityFlags   []                    the Worker's flags; "python_workers" is implemented
//                                              by this host and not passed to workerd. With the
//                                              date they pick the Python (python_runtime.mjs):
//                                              3.13 (Pyodide 0.28.2) or 3.14 (Pyodide 314.0.6)
//   pythonCompatFlags    (from the date)       values of the SDK's _cloudflare_compat_flags
//   sdkDir               .venv site-packages   directory holding the `workers` SDK package
//   cf                   Miniflare placeholder request.cf when the client sends no MF-CF-Blob
//                                              header (country US, continent NA); never fetched
//   brokenDurableObjects {}                    TEST ONLY: {binding: "throw" | "hang"} binds a
//                                              binding to a host class that throws on / never
//                                              answers every call
//   brokenKvNamespaces   []                    TEST ONLY: KV bindings whose every call throws
//   replicas             1                     how many copies of the Worker to run, each its
//                                              own isolate sharing the Durable Objects and KV;
//                                              copies after the first print `REPLICA <url>`
//   triggerHandlers      false                 serve GET /cdn-cgi/local/scheduled (runs the
//                                              Cron Trigger handler; never in production)
//   exitOnStdinEnd       false                 exit when stdin closes (the parent died)
//   peers                []                    BENCHMARKS ONLY: JavaScript Workers run in the same
//                                              workerd, each on a socket of its own, printed as
//                                              `PEER <name> <url>`: [{name, module (a file),
//                                              bindings, durableObjects: {BINDING: {className,
//                                              worker?}}}]; `worker: "gateway"` binds the Python
//                                              Worker's own class (e.g. RateLimiter)
//
// Prints two lines on stdout once a first request has been served (Pyodide boots while workerd
// loads the Worker; a warm-up request then runs the per-isolate first-request work):
// `RUNTIME {json}` (the compatibility date and flags, the Python and Pyodide versions, and
// every binding's kind, as seen from inside the Worker), then `READY http://127.0.0.1:<port>`. Everything else (workerd, the Worker's console, Miniflare)
// goes to stderr. SIGTERM/SIGINT/SIGHUP dispose Miniflare (which stops workerd) and exit 0.
// What this relies on inside Miniflare is checked at every launch (miniflare_contract.mjs).

import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { zipSync } from "fflate";
import * as miniflare from "miniflare";
import {
  checkMiniflareModule,
  convertedOptions,
  hookedSignals,
  replaceExitHooks,
} from "./miniflare_contract.mjs";
import { pythonRuntime, selectPython } from "./python_runtime.mjs";
import { compiledStdlib, compiledTree } from "./stdlib_cache.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const MINIFLARE_VERSION = createRequire(import.meta.url)("miniflare/package.json").version;
const CACHE_DIR = path.join(REPO, "node_modules", ".cache", "edge-limiter-local-runtime");
const WARMUP_HEADER = "x-edge-local-runtime-warmup";
const WARMUP_CF = { country: "AQ", continent: "AN" };
const WARMUP_CLIENT = "192.0.2.41";
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAIN_WORKER = "gateway";
// Flags this host implements itself: it runs Pyodide inside a JavaScript Worker.
const HOSTED_FLAGS = ["python_workers"];
// What of the SDK's site-packages the Worker gets.
const SDK_TOP_LEVEL = new Set(["workers", "asgi.py"]);

// Dates from workerd's compatibility-date.capnp for the SDK's two flags.
const PYTHON_FLAG_DATES = {
  python_request_headers_preserve_commas: "2026-02-17",
  python_workflows_implicit_dependencies: "2026-02-25",
};

/** Throws unless the warm-up's MF-CF-Blob and CF-Connecting-IP reached the Worker unchanged. */
function checkStandIns(described) {
  const seen = described.warmup ?? {};
  const problems = [];
  if (seen.country !== WARMUP_CF.country || seen.continent !== WARMUP_CF.continent) {
    problems.push(`an MF-CF-Blob header no longer sets request.cf (sent ${JSON.stringify(WARMUP_CF)}, the Worker saw ${JSON.stringify({ country: seen.country, continent: seen.continent })})`);
  }
  if (seen.clientIp !== WARMUP_CLIENT) {
    problems.push(`a client's CF-Connecting-IP no longer reaches the Worker (sent ${WARMUP_CLIENT}, the Worker saw ${seen.clientIp})`);
  }
  if (problems.length > 0) {
    throw new Error(`miniflare ${MINIFLARE_VERSION}: ${problems.join("; ")}; the tests and docs/local-runtime.md rely on both`);
  }
}

function fail(message) {
  process.stderr.write(`launch.mjs: ${message}\n`);
  process.exit(2);
}

function readSpec(specPath) {
  if (!specPath) {
    fail("usage: node scripts/local_runtime/launch.mjs SPEC.json");
  }
  const raw = JSON.parse(readFileSync(specPath, "utf8"));
  const spec = {
    mainModule: "entry",
    host: "127.0.0.1",
    port: 0,
    persistDir: undefined,
    vars: {},
    durableObjects: { RATE_LIMITER: "RateLimiter" },
    kvNamespaces: ["CACHE"],
    analyticsEngineDatasets: {},
    recordAnalytics: false,
    compatibilityDate: undefined,
    compatibilityFlags: [],
    pythonCompatFlags: undefined,
    sdkDir: undefined,
    brokenDurableObjects: {},
    brokenKvNamespaces: [],
    replicas: 1,
    triggerHandlers: false,
    exitOnStdinEnd: false,
    peers: [],
    ...raw,
  };
  if (!spec.workerDir) {
    fail("spec.workerDir is required");
  }
  if (!/^\d{4}-\d{2}-\d{2}$/.test(spec.compatibilityDate ?? "")) {
    fail(`spec.compatibilityDate is required (YYYY-MM-DD, as in wrangler.toml), got ${spec.compatibilityDate}`);
  }
  try {
    spec.python = pythonRuntime(REPO, selectPython(spec.compatibilityDate, spec.compatibilityFlags));
  } catch (error) {
    fail(error.message);
  }
  spec.compatibilityFlags = spec.compatibilityFlags.filter((flag) => !HOSTED_FLAGS.includes(flag));
  spec.workerDir = path.resolve(path.dirname(specPath), spec.workerDir);
  if (!existsSync(path.join(spec.workerDir, `${spec.mainModule}.py`))) {
    fail(`${spec.workerDir} has no ${spec.mainModule}.py (build the Worker first)`);
  }
  for (const [binding, className] of Object.entries(spec.durableObjects)) {
    if (!IDENTIFIER.test(binding) || !IDENTIFIER.test(className)) {
      fail(`durableObjects: ${binding} -> ${className} must both be identifiers`);
    }
  }
  for (const [binding, mode] of Object.entries(spec.brokenDurableObjects)) {
    if (!(binding in spec.durableObjects)) {
      fail(`brokenDurableObjects.${binding}: no such binding in durableObjects`);
    }
    if (mode !== "throw" && mode !== "hang") {
      fail(`brokenDurableObjects.${binding}: mode must be "throw" or "hang", not ${mode}`);
    }
  }
  for (const peer of spec.peers) {
    if (!IDENTIFIER.test(peer.name ?? "") || !existsSync(path.resolve(path.dirname(specPath), peer.module ?? ""))) {
      fail(`peers: ${JSON.stringify(peer)} needs a name (an identifier) and an existing module file`);
    }
    peer.module = path.resolve(path.dirname(specPath), peer.module);
  }
  spec.pythonCompatFlags ??= Object.fromEntries(
    Object.entries(PYTHON_FLAG_DATES).map(([flag, date]) => [flag, spec.compatibilityDate >= date]),
  );
  spec.sdkDir = path.resolve(spec.sdkDir ?? findVenvSitePackages());
  if (!existsSync(path.join(spec.sdkDir, "workers", "__init__.py"))) {
    fail(`${spec.sdkDir} holds no workers/ package (run scripts/bootstrap)`);
  }
  return spec;
}

function findVenvSitePackages() {
  const lib = path.join(REPO, ".venv", "lib");
  const candidates = existsSync(lib) ? readdirSync(lib).filter((d) => d.startsWith("python")) : [];
  for (const dir of candidates) {
    const sitePackages = path.join(lib, dir, "site-packages");
    if (existsSync(path.join(sitePackages, "workers"))) {
      return sitePackages;
    }
  }
  fail("cannot find the workers-runtime-sdk in .venv; pass spec.sdkDir or run scripts/bootstrap");
}

// ---------------------------------------------------------------------------------------------
// Zips of the Worker's code and the SDK (zipimport reads them in Pyodide)
// ---------------------------------------------------------------------------------------------

function listFiles(root, relative = "") {
  const files = [];
  for (const name of readdirSync(path.join(root, relative)).sort()) {
    if (name.startsWith(".") || name === "__pycache__" || name.endsWith(".pyc")) {
      continue;
    }
    const rel = relative ? `${relative}/${name}` : name;
    if (statSync(path.join(root, rel)).isDirectory()) {
      files.push(...listFiles(root, rel));
    } else {
      files.push(rel);
    }
  }
  return files;
}

// Stored (level 0): Python's zipfile then needs no zlib, and building takes milliseconds. A
// fixed mtime makes the zip byte-identical for identical input.
const ZIP_OPTIONS = { level: 0, mtime: new Date(Date.UTC(1980, 0, 1)) };

function zipDirectory(root, include = () => true) {
  const files = Object.fromEntries(
    listFiles(root)
      .filter(include)
      .map((name) => [name, [new Uint8Array(readFileSync(path.join(root, name))), ZIP_OPTIONS]]),
  );
  return zipSync(files, ZIP_OPTIONS);
}

// ---------------------------------------------------------------------------------------------
// The Miniflare configuration
// ---------------------------------------------------------------------------------------------

function entryModule(spec, brokenBindings) {
  const lines = [
    'import * as host from "./host.mjs";',
    "export default host.entrypoint;",
  ];
  for (const className of new Set(Object.values(spec.durableObjects))) {
    lines.push(`export const ${className} = host.durableObjectClass(${JSON.stringify(className)});`);
  }
  for (const [binding, exportName] of Object.entries(brokenBindings)) {
    const mode = JSON.stringify(spec.brokenDurableObjects[binding]);
    lines.push(
      `export const ${exportName} = host.brokenDurableObjectClass(${JSON.stringify(binding)}, ${mode});`,
    );
  }
  return `${lines.join("\n")}\n`;
}

function miniflareOptions(spec, warmupToken, stdlib, appZip, sdkZip) {
  const brokenBindings = Object.fromEntries(
    Object.keys(spec.brokenDurableObjects).map((binding) => [binding, `LocalRuntimeBroken_${binding}`]),
  );
  const config = {
    mainModule: spec.mainModule,
    durableObjectClasses: [...new Set(Object.values(spec.durableObjects))],
    pythonCompatFlags: spec.pythonCompatFlags,
    compatibilityDate: spec.compatibilityDate,
    compatibilityFlags: spec.compatibilityFlags,
    brokenKvNamespaces: spec.brokenKvNamespaces,
    recordAnalytics: spec.recordAnalytics ? Object.keys(spec.analyticsEngineDatasets) : [],
    warmupToken,
    python: { version: spec.python.version, pyodide: spec.python.pyodide },
  };
  const file = (name) => path.join(HERE, name);
  const pyodideFile = (name) => readFileSync(path.join(spec.python.dir, name));
  const modules = [
    { type: "ESModule", path: file("entry.mjs"), contents: entryModule(spec, brokenBindings) },
    { type: "ESModule", path: file("host.mjs"), contents: readFileSync(file("host.mjs")) },
    { type: "ESModule", path: file("prelude.mjs"), contents: readFileSync(file("prelude.mjs")) },
    { type: "ESModule", path: file("config.mjs"), contents: `export default ${JSON.stringify(config)};\n` },
    { type: "Text", path: file("host_bridge.py"), contents: readFileSync(file("host_bridge.py"), "utf8") },
    { type: "ESModule", path: file(`pyodide/${spec.python.asm}`), contents: pyodideFile(spec.python.asm) },
    { type: "ESModule", path: file("pyodide/create.mjs"), contents: createModule(spec.python.asm) },
    { type: "ESModule", path: file("pyodide/pyodide.mjs"), contents: pyodideFile("pyodide.mjs") },
    { type: "CompiledWasm", path: file("pyodide/pyodide.asm.wasm"), contents: pyodideFile("pyodide.asm.wasm") },
    { type: "Data", path: file("pyodide/python_stdlib.zip"), contents: stdlib },
    { type: "Text", path: file("pyodide/pyodide-lock.json"), contents: pyodideFile("pyodide-lock.json").toString("utf8") },
    { type: "Data", path: file("bundle/app.zip"), contents: appZip },
    { type: "Data", path: file("bundle/sdk.zip"), contents: sdkZip },
  ];
  const durableObjects = Object.fromEntries(
    Object.entries(spec.durableObjects).map(([binding, className]) => [
      binding,
      { className: brokenBindings[binding] ?? className, useSQLite: true },
    ]),
  );
  const worker = {
    name: MAIN_WORKER,
    modules,
    modulesRoot: HERE,
    compatibilityDate: spec.compatibilityDate,
    compatibilityFlags: spec.compatibilityFlags,
    bindings: spec.vars,
    durableObjects,
    kvNamespaces: spec.kvNamespaces,
    analyticsEngineDatasets: spec.analyticsEngineDatasets,
  };
  // Replicas: the same Worker again, each its own isolate, sharing the main Worker's Durable
  // Objects and KV (as isolates in different locations share them in production). Each is
  // reached on a socket of its own.
  const replicas = [];
  for (let index = 1; index < spec.replicas; index++) {
    replicas.push({
      ...worker,
      name: `${MAIN_WORKER}-${index}`,
      durableObjects: Object.fromEntries(
        Object.entries(durableObjects).map(([binding, target]) => [
          binding,
          { ...target, scriptName: MAIN_WORKER },
        ]),
      ),
      unsafeDirectSockets: [{ host: spec.host, port: 0 }],
    });
  }
  const peers = spec.peers.map((peer) => ({
    name: peer.name,
    modules: [{ type: "ESModule", path: path.resolve(peer.module), contents: readFileSync(peer.module) }],
    modulesRoot: path.dirname(path.resolve(peer.module)),
    compatibilityDate: spec.compatibilityDate,
    compatibilityFlags: spec.compatibilityFlags,
    bindings: peer.bindings ?? {},
    durableObjects: Object.fromEntries(
      Object.entries(peer.durableObjects ?? {}).map(([binding, target]) => [
        binding,
        {
          className: target.className,
          useSQLite: true,
          ...(target.worker ? { scriptName: target.worker === "gateway" ? MAIN_WORKER : target.worker } : {}),
        },
      ]),
    ),
    unsafeDirectSockets: [{ host: spec.host, port: 0 }],
  }));
  const options = {
    workers: [worker, ...replicas, ...peers],
    host: spec.host,
    port: spec.port,
    // A plain object or false: Miniflare would otherwise download a cf object from the internet.
    cf: spec.cf ?? false,
    // GET /cdn-cgi/local/scheduled runs the Worker's Cron Trigger handler (as
    // `wrangler dev --test-scheduled` does); production has no such path.
    unsafeTriggerHandlers: spec.triggerHandlers,
    log: new miniflare.Log(miniflare.LogLevel.WARN),
    logRequests: false,
    // workerd's output (the Worker's console included), one line per log.
    handleStructuredLogs({ message }) {
      process.stderr.write(message.endsWith("\n") ? message : `${message}\n`);
    },
    // Durable Object (SQLite) state under <persistDir>/do, KV under <persistDir>/kv. Never
    // `unsafeEphemeralDurableObjects`: it silently drops SQLite storage. Without a persist
    // directory Miniflare keeps state in memory for the life of the process.
    resourcePersistencePath: spec.persistDir ? path.resolve(spec.persistDir) : undefined,
    // Miniflare 5 starts a workerd that died again by itself (maybe on another port, with a
    // fresh isolate nobody warmed up). This launcher's contract is to exit instead, so that
    // whoever started it (LocalGateway, `edge-limiter dev`) notices and starts it again.
    unsafeHandleRuntimeRestart() {
      process.stderr.write("launch.mjs: workerd stopped unexpectedly; exiting\n");
      return shutdown(1);
    },
  };
  return convertedOptions(miniflare, MINIFLARE_VERSION, options);
}

/**
 * The module host.mjs imports Pyodide's module factory from. Pyodide 0.28's `pyodide.asm.js`
 * is a script whose last line sets `globalThis._createPyodideModule` (its loader looks for
 * that global); Pyodide 314's `pyodide.asm.mjs` exports the factory, passed to `loadPyodide`
 * as `createPyodideModule` (its loader would otherwise `import()` the file by URL).
 */
function createModule(asm) {
  if (asm === "pyodide.asm.js") {
    return `import "./pyodide.asm.js";\nexport default undefined;\n`;
  }
  return `export { default } from "./pyodide.asm.mjs";\n`;
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

// Miniflare's own Log writes through console.log: keep stdout for the READY line only.
console.log = console.error;
console.info = console.error;

const spec = readSpec(process.argv[2]);
const warmupToken = randomUUID();
const started = performance.now();
const stdlib = await compiledStdlib(spec.python.dir, CACHE_DIR, (line) =>
  process.stderr.write(`launch.mjs: ${line}\n`),
);
// The Worker's code and the SDK with bytecode, as the stdlib (see stdlib_cache.mjs); where
// host_bridge.py unpacks them decides the file names compiled in.
const log = (line) => process.stderr.write(`launch.mjs: ${line}\n`);
const appZip = await compiledTree(
  spec.python.dir, CACHE_DIR, zipDirectory(spec.workerDir), "/session/metadata", "app", log,
);
const sdkZip = await compiledTree(
  spec.python.dir,
  CACHE_DIR,
  zipDirectory(spec.sdkDir, (name) => SDK_TOP_LEVEL.has(name.split("/")[0])),
  spec.python.sitePackages,
  "sdk",
  log,
);
let options;
try {
  checkMiniflareModule(miniflare, MINIFLARE_VERSION);
  options = miniflareOptions(spec, warmupToken, stdlib, appZip, sdkZip);
} catch (error) {
  fail(error.message);
}
const signalsBefore = hookedSignals();
const mf = new miniflare.Miniflare(options);

let stopping;
function shutdown(code) {
  stopping ??= (async () => {
    const timer = setTimeout(() => process.exit(code || 1), 15_000);
    try {
      await mf.dispose();
    } catch (error) {
      process.stderr.write(`launch.mjs: dispose failed: ${error?.stack ?? error}\n`);
    }
    clearTimeout(timer);
    process.exit(code);
  })();
  return stopping;
}
// Miniflare's own SIGTERM/SIGINT/SIGHUP hooks SIGKILL workerd and exit at once (code
// 143/130/129), before workerd is reaped; replace them with a full dispose, then exit 0. Once
// now and again when workerd runs, in case Miniflare hooks them only then.
const exitHooks = () => replaceExitHooks(MINIFLARE_VERSION, signalsBefore, () => shutdown(0));
try {
  exitHooks();
} catch (error) {
  process.stderr.write(`launch.mjs: ${error.message}\n`);
  await shutdown(2);
}
if (spec.exitOnStdinEnd) {
  process.stdin.on("end", () => shutdown(0));
  process.stdin.on("error", () => shutdown(0));
  process.stdin.resume();
}

try {
  const url = await mf.ready;
  exitHooks();
  const origin = url.origin;
  // Over HTTP as a client sends it, with the two local stand-ins for what Cloudflare sets
  // (docs/local-runtime.md): the host checks that they reach the Worker.
  const warmup = await fetch(origin, {
    headers: {
      [WARMUP_HEADER]: warmupToken,
      "MF-CF-Blob": JSON.stringify(WARMUP_CF),
      "CF-Connecting-IP": WARMUP_CLIENT,
    },
  });
  const described = await warmup.text();
  if (warmup.status !== 200) {
    throw new Error(`warm-up request answered ${warmup.status}, expected 200: ${described}`);
  }
  checkStandIns(JSON.parse(described));
  // What the Worker got, as seen from inside it (bindings by type, flags, date).
  process.stdout.write(`RUNTIME ${described}\n`);
  // The probe's token, for the test harness on the other end of this pipe only.
  process.stdout.write(`PROBE ${WARMUP_HEADER} ${warmupToken}\n`);
  for (let index = 1; index < spec.replicas; index++) {
    const direct = await mf.unsafeGetDirectURL(`${MAIN_WORKER}-${index}`);
    const answer = await fetch(direct, { headers: { [WARMUP_HEADER]: warmupToken } });
    await answer.arrayBuffer();
    if (answer.status !== 200) {
      throw new Error(`replica ${index} warm-up answered ${answer.status}`);
    }
    process.stdout.write(`REPLICA ${direct.origin}\n`);
  }
  for (const peer of spec.peers) {
    const direct = await mf.unsafeGetDirectURL(peer.name);
    process.stdout.write(`PEER ${peer.name} ${direct.origin}\n`);
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(2);
  process.stderr.write(`launch.mjs: ready in ${seconds} s at ${origin}\n`);
  process.stdout.write(`READY ${origin}\n`);
} catch (error) {
  process.stderr.write(`launch.mjs: the local runtime failed to start: ${error?.stack ?? error}\n`);
  await shutdown(1);
}
