// Host for the project's unchanged Python Worker on local workerd: boots npm Pyodide (0.28.2 for
// Python 3.13, 314.0.6 for Python 3.14; launch.mjs picks it from the Worker's date and flags) at
// global scope (top-level await), loads the workers-runtime-sdk and the Worker's code, and
// provides JavaScript classes (extending the real WorkerEntrypoint / DurableObject) that forward
// every call to the Python classes. launch.mjs generates the entry module that exports them.
//
// Why each trick exists (measured on workerd 2026-04-26, again on 2026-11-17):
// - Boot at global scope: inside a request workerd refuses `new WebAssembly.Module`, eval and
//   `new Function` ("disallowed by embedder"); at global scope it allows them. The top-level
//   await resolves through microtasks only (no timers or I/O), which workerd permits.
// - Module types: Pyodide's module factory comes from pyodide/create.mjs (launch.mjs writes it:
//   0.28's pyodide.asm.js sets `globalThis._createPyodideModule`, 314's pyodide.asm.mjs exports
//   it), the wasm is CompiledWasm (a WebAssembly.Module), the stdlib and the Python code are
//   Data, the lock file is Text (`lockFileContents`).
// - prelude.mjs: `importScripts`, `location`, `setImmediate`, synchronous `WebAssembly.compile`
//   and `instantiate`, and `process` hidden, for Pyodide's environment sniffing and Emscripten
//   (reasons in that file); undone after the boot.
// - During the boot only, then restored (a reference Python kept forwards to the original):
//   - `fetch`: workerd refuses fetch at global scope; Pyodide fetches the stdlib zip and the
//     wasm by URL. The stand-in serves the imported modules as plain `{ok, arrayBuffer}` objects
//     (a real Response is refused at global scope too).
//   - `WebAssembly.instantiateStreaming`: Pyodide 0.28 hard-codes it; the stand-in instantiates
//     the already compiled module synchronously with `new WebAssembly.Instance`.
//   - `crypto.getRandomValues`: refused at global scope; Emscripten and CPython draw entropy at
//     start-up. The stand-in fills deterministically (with PYTHONHASHSEED=0), so `random` starts
//     identically in every isolate: the first call into Python reseeds it from real entropy, as
//     workerd does before a Python Worker's first request.
// - The stdlib zip launch.mjs passes carries bytecode (stdlib_cache.mjs): npm Pyodide ships
//   sources only, and compiling them at every boot took most of the boot time.
// - `_cloudflare_compat_flags` and `_pyodide_entrypoint_helper` are the two internal modules
//   the SDK imports; workerd provides them to production Python Workers.

import { bootOrigin, restoreBootGlobals } from "./prelude.mjs";
import createPyodideModule from "./pyodide/create.mjs";
import { loadPyodide } from "./pyodide/pyodide.mjs";
import pyodideWasm from "./pyodide/pyodide.asm.wasm";
import pythonStdlib from "./pyodide/python_stdlib.zip";
import pyodideLock from "./pyodide/pyodide-lock.json";
import bridgeSource from "./host_bridge.py";
import appZip from "./bundle/app.zip";
import sdkZip from "./bundle/sdk.zip";
import config from "./config.mjs";
import * as cloudflareWorkers from "cloudflare:workers";
import * as cloudflareSockets from "cloudflare:sockets";
import { DurableObject, WorkerEntrypoint } from "cloudflare:workers";

const BRIDGE_MODULE = "_edge_local_host";
/** Header carrying the per-launch token of launch.mjs's warm-up request. */
export const WARMUP_HEADER = "x-edge-local-runtime-warmup";

// ---------------------------------------------------------------------------------------------
// Boot-only stand-ins
// ---------------------------------------------------------------------------------------------

function bootFile(buffer) {
  return { ok: true, status: 200, arrayBuffer: async () => buffer };
}

function deterministicFill(view) {
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  let state = 0x2545f491;
  for (let i = 0; i < bytes.length; i++) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    bytes[i] = state >>> 24;
  }
  return view;
}

let booting = true;

/**
 * Puts `bootOnly` in place of `target[name]` for the boot; returns a function that puts the
 * original back. Python modules imported during the boot may have kept a reference to the
 * stand-in (e.g. `pyodide.http` holds on to `js.fetch`), so after the boot it forwards to the
 * original.
 */
function replaceForBoot(target, name, bootOnly) {
  const own = Object.getOwnPropertyDescriptor(target, name);
  const original = target[name];
  const standIn = function (...args) {
    return booting ? bootOnly.apply(this, args) : original.apply(target, args);
  };
  Object.defineProperty(target, name, { value: standIn, configurable: true, writable: true });
  return () => {
    if (own) {
      Object.defineProperty(target, name, own);
    } else {
      delete target[name];
    }
  };
}

async function withBootStandIns(run) {
  const restorers = [
    replaceForBoot(globalThis, "fetch", async (resource) => {
      const url = String(resource);
      if (url === `${bootOrigin}python_stdlib.zip`) {
        return bootFile(pythonStdlib);
      }
      if (url === `${bootOrigin}pyodide.asm.wasm`) {
        return bootFile(new ArrayBuffer(0)); // consumed by the instantiateStreaming stand-in
      }
      throw new Error(`local runtime: fetch(${url}) is not available at global scope`);
    }),
    replaceForBoot(WebAssembly, "instantiateStreaming", async (_response, imports) => ({
      instance: new WebAssembly.Instance(pyodideWasm, imports),
      module: pyodideWasm,
    })),
    replaceForBoot(crypto, "getRandomValues", deterministicFill),
  ];
  try {
    return await run();
  } finally {
    booting = false;
    for (const restore of restorers.reverse()) {
      restore();
    }
    restoreBootGlobals();
  }
}

// ---------------------------------------------------------------------------------------------
// The SDK's internal modules
// ---------------------------------------------------------------------------------------------

// Python passes its awaitables to `ctx.waitUntil` as borrowed proxies that are destroyed when the
// call returns; keep an owned copy until it settles. Like workerd, only an ExecutionContext is
// patched.
const waitUntilPatched = new WeakSet();
function patchWaitUntil(ctx) {
  if (Object.prototype.toString.call(ctx) !== "[object ExecutionContext]") {
    return;
  }
  if (waitUntilPatched.has(ctx)) {
    return;
  }
  const original = ctx.waitUntil.bind(ctx);
  ctx.waitUntil = (awaitable) => original(settleOwned(awaitable));
  waitUntilPatched.add(ctx);
}

function settleOwned(awaitable) {
  const owned = typeof awaitable?.copy === "function" ? awaitable.copy() : awaitable;
  return (async () => {
    try {
      await owned;
    } finally {
      if (owned !== awaitable && typeof owned?.destroy === "function") {
        owned.destroy();
      }
    }
  })();
}

const workersModule = new Proxy(cloudflareWorkers, {
  get(target, property, receiver) {
    if (property === "waitUntil") {
      return (awaitable) => target.waitUntil(settleOwned(awaitable));
    }
    return Reflect.get(target, property, receiver);
  },
});

const entrypointHelper = {
  cloudflareWorkersModule: workersModule,
  cloudflareSocketsModule: cloudflareSockets,
  patchWaitUntil,
  doAnImport: (name) => import(name),
  patch_env_helper() {
    throw new Error("workers.patch_env is not supported by the local runtime");
  },
};

// ---------------------------------------------------------------------------------------------
// Boot
// ---------------------------------------------------------------------------------------------

const { bridge, classes, module, versions } = await withBootStandIns(async () => {
  const pyodide = await loadPyodide({
    ...(createPyodideModule ? { createPyodideModule } : {}),
    indexURL: bootOrigin,
    packageBaseUrl: bootOrigin,
    lockFileContents: pyodideLock,
    env: { HOME: "/session", PYTHONHASHSEED: "0" },
    stdout: (line) => console.log(line),
    stderr: (line) => console.error(line),
  });
  pyodide.registerJsModule("_cloudflare_compat_flags", config.pythonCompatFlags);
  pyodide.registerJsModule("_pyodide_entrypoint_helper", entrypointHelper);

  const sitePackages = pyodide.runPython("import sysconfig; sysconfig.get_path('purelib')");
  pyodide.FS.mkdirTree(sitePackages);
  pyodide.FS.writeFile(`${sitePackages}/${BRIDGE_MODULE}.py`, bridgeSource);
  pyodide.FS.mkdirTree("/session/bundle");
  pyodide.FS.writeFile("/session/bundle/app.zip", new Uint8Array(appZip));
  pyodide.FS.writeFile("/session/bundle/sdk.zip", new Uint8Array(sdkZip));

  // The path finders cache directory listings by mtime, and the clock stands still at global
  // scope: a file written after the first import in that directory is otherwise not seen.
  pyodide.runPython("import importlib; importlib.invalidate_caches()");
  const bridge = pyodide.pyimport(BRIDGE_MODULE);
  bridge.install("/session/bundle/app.zip", "/session/bundle/sdk.zip");
  let described;
  try {
    described = bridge.load_main(config.mainModule, config.durableObjectClasses);
  } catch (error) {
    console.error(`local runtime: importing ${config.mainModule}.py failed:\n${error.message}`);
    throw error;
  }
  const versions = { python: pyodide.runPython("import sys; sys.version.split()[0]"), pyodide: pyodide.version };
  if (versions.pyodide !== config.python.pyodide) {
    throw new Error(`local runtime: booted Pyodide ${versions.pyodide}, expected ${config.python.pyodide}`);
  }
  return { bridge, classes: JSON.parse(described), module: pyodide._module, versions };
});
console.error(`local runtime: Python ${versions.python} (Pyodide ${versions.pyodide}) loaded`);

// ---------------------------------------------------------------------------------------------
// The C stack leak of npm Pyodide 0.28.2 under JSPI (fixed in Pyodide 314)
// ---------------------------------------------------------------------------------------------

// Every call into Python made with stack switching (JSPI: `callPromising`, and every asyncio
// callback of Pyodide's event loop, through `Module.callPyObjectMaybePromising`) takes 4 bytes
// (16, aligned) of the C stack for its error slot and gives them back only when the call
// raises (pyodide/pyodide#6249, fixed upstream after 0.29). A request runs several loop steps,
// so one isolate used to exhaust its 5 MB stack after 80,000-110,000 requests ("memory access
// out of bounds", a fatal error). The guard brackets those calls: once none is in flight (they
// end within microtasks: a loop step is synchronous Python, nothing here suspends a stack),
// the stack pointer goes back to where it was when the first of them began. The host's own
// calls into Python are made without stack switching (the Worker's code still runs in loop
// steps, which have it), so they take nothing from the stack.
function guardStack(module) {
  let inFlight = 0;
  let base = 0;
  const original = module.callPyObjectMaybePromising;
  module.callPyObjectMaybePromising = async function (...args) {
    if (inFlight++ === 0) {
      base = module.stackSave();
    }
    try {
      return await original.apply(this, args);
    } finally {
      if (--inFlight === 0 && module.stackSave() < base) {
        module.stackRestore(base);
      }
    }
  };
}
const STACK_LEAKS = versions.pyodide.startsWith("0.28.");
if (STACK_LEAKS) {
  if (typeof module.callPyObjectMaybePromising !== "function" || typeof module.stackSave !== "function") {
    throw new Error(`local runtime: Pyodide ${versions.pyodide} lacks the internals guardStack wraps`);
  }
  guardStack(module);
}
const bootStackPointer = module.stackSave();

const invoke = bridge.invoke;
let reseeded = false;

/** Work workerd does before a Python Worker's first request: real entropy for `random`. */
function beforeRequest() {
  if (!reseeded) {
    bridge.reseed();
    reseeded = true;
  }
}

// ---------------------------------------------------------------------------------------------
// JavaScript classes forwarding to the Python classes
// ---------------------------------------------------------------------------------------------

// How workerd calls each method (see host_bridge.py): `relaxed` drops surplus arguments,
// `convert` applies python_from_rpc to the arguments and python_to_rpc to the result.
const RELAXED_CONVERTED = new Set(["fetch", "test"]);
const RAW_HANDLERS = {
  worker: new Set(["connect", "scheduled"]),
  durableObject: new Set(["alarm", "connect", "webSocketMessage", "webSocketClose", "webSocketError"]),
};
// Handlers whose exceptions nobody else reports: workerd logs them as uncaught.
const LOGGED_FAILURES = {
  worker: new Set(["fetch", "scheduled", "queue"]),
  durableObject: new Set(["alarm"]),
};
// Python names that would clash with the JavaScript class itself.
const NOT_FORWARDED = new Set(["constructor", "then", "ctx", "env"]);

function callMode(kind, name) {
  if (RELAXED_CONVERTED.has(name)) {
    return { relaxed: true, convert: true };
  }
  if (RAW_HANDLERS[kind].has(name)) {
    return { relaxed: true, convert: false };
  }
  return { relaxed: false, convert: true };
}

const pythonInstances = new WeakMap();
// How many times each Durable Object method was called in this isolate (tests count the
// calls a feature saves; reported by the launcher's token-protected probe).
const callCounts = {};

function callPython(wrapper, name, mode, args) {
  beforeRequest();
  const instance = pythonInstances.get(wrapper);
  return invoke.callWithOptions(
    { promising: false }, // see guardStack
    instance,
    name,
    mode.relaxed,
    mode.convert,
    ...args,
  );
}

function forwardingClass(Base, kind, className) {
  const pythonClass = bridge.entrypoint_class(className);
  const wrapper = class extends Base {
    constructor(ctx, env) {
      super(ctx, env);
      pythonInstances.set(this, pythonClass(ctx, withBrokenKv(env)));
    }
  };
  Object.defineProperty(wrapper, "name", { value: className });
  for (const name of classes[className]) {
    if (NOT_FORWARDED.has(name)) {
      continue;
    }
    const mode = callMode(kind, name);
    const logFailure = LOGGED_FAILURES[kind].has(name);
    const counted = `${className}.${name}`;
    Object.defineProperty(wrapper.prototype, name, {
      value: async function (...args) {
        if (kind === "durableObject") {
          callCounts[counted] = (callCounts[counted] ?? 0) + 1;
        }
        try {
          return await callPython(this, name, mode, args);
        } catch (error) {
          if (logFailure) {
            console.error(`Uncaught exception in ${className}.${name}:\n${error?.message ?? error}`);
          }
          throw error;
        }
      },
      configurable: true,
      writable: true,
    });
  }
  return wrapper;
}

/** The `default` export: the Python `Default(WorkerEntrypoint)`. */
export const entrypoint = (() => {
  const forwarding = forwardingClass(WorkerEntrypoint, "worker", "Default");
  const pythonFetch = forwarding.prototype.fetch;
  // The warm-up request of launch.mjs carries a token only it knows; it runs the per-isolate
  // work of the first request, answers what the Worker was given, and never reaches the
  // Python Worker.
  forwarding.prototype.fetch = function (request) {
    if (config.warmupToken && request.headers.get(WARMUP_HEADER) === config.warmupToken) {
      beforeRequest();
      return Response.json(describeRuntime(this.env, request));
    }
    if (pythonFetch === undefined) {
      throw new TypeError("The Python class Default defines no fetch method");
    }
    return pythonFetch.call(this, request);
  };
  return forwarding;
})();

/**
 * TEST ONLY: `env` with the KV namespaces named in `brokenKvNamespaces` replaced by one whose
 * every operation fails, as KV does when it is overloaded or unreachable, and the Analytics
 * Engine datasets in `recordAnalytics` printing every data point (locally they keep none).
 */
function withBrokenKv(env) {
  const broken = config.brokenKvNamespaces ?? [];
  const recorded = config.recordAnalytics ?? [];
  if (broken.length === 0 && recorded.length === 0) {
    return env;
  }
  const recording = (name) => ({
    writeDataPoint(point) {
      console.error(`ANALYTICS ${JSON.stringify({ binding: name, ...point })}`);
      return env[name].writeDataPoint(point);
    },
  });
  const failing = (name) => {
    const fail = async (operation) => {
      throw new Error(`local runtime: KV namespace ${name} is broken on purpose (${operation})`);
    };
    return {
      get: () => fail("get"),
      getWithMetadata: () => fail("getWithMetadata"),
      put: () => fail("put"),
      delete: () => fail("delete"),
      list: () => fail("list"),
    };
  };
  return new Proxy(env, {
    get(target, property, receiver) {
      if (broken.includes(property)) {
        return failing(property);
      }
      if (recorded.includes(property)) {
        return recording(property);
      }
      return Reflect.get(target, property, receiver);
    },
  });
}

/** A binding's kind as the Worker sees it: a var's JSON type, or the binding's class name. */
function bindingKind(value) {
  if (typeof value === "string") {
    return "text";
  }
  const tag = Object.prototype.toString.call(value).slice(8, -1);
  if (tag === "Object" && value?.constructor === Object) {
    return "json";
  }
  return value?.constructor?.name && value.constructor.name !== "Object" ? value.constructor.name : tag;
}

function describeRuntime(env, request) {
  const bindings = {};
  for (const name of Object.keys(env).sort()) {
    bindings[name] = bindingKind(env[name]);
  }
  return {
    compatibilityDate: config.compatibilityDate,
    compatibilityFlags: config.compatibilityFlags,
    pythonCompatFlags: config.pythonCompatFlags,
    python: versions.python,
    pyodide: versions.pyodide,
    // What the launcher's warm-up sent as MF-CF-Blob and CF-Connecting-IP (it checks both).
    warmup: {
      country: request.cf?.country,
      continent: request.cf?.continent,
      clientIp: request.headers.get("cf-connecting-ip"),
    },
    bindings,
    calls: callCounts,
    // How far the C stack pointer is below where it was after the boot (see guardStack).
    stackTaken: bootStackPointer - module.stackSave(),
  };
}

/** The export for the Python Durable Object class `className`. */
export function durableObjectClass(className) {
  return forwardingClass(DurableObject, "durableObject", className);
}

async function hangForever() {
  // A pending timer keeps workerd from cancelling the call as hung.
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 60_000));
  }
}

/**
 * TEST ONLY: a Durable Object class that answers every RPC method of the project's Durable
 * Objects (and fetch, alarm) by throwing (mode "throw") or never answering (mode "hang").
 */
export function brokenDurableObjectClass(bindingName, mode) {
  if (mode !== "throw" && mode !== "hang") {
    throw new TypeError(`brokenDurableObjects.${bindingName}: mode must be "throw" or "hang"`);
  }
  const broken = class extends DurableObject {};
  Object.defineProperty(broken, "name", { value: `Broken_${bindingName}` });
  const names = new Set(["fetch", "alarm"]);
  for (const className of config.durableObjectClasses) {
    for (const name of classes[className]) {
      if (!NOT_FORWARDED.has(name)) {
        names.add(name);
      }
    }
  }
  for (const name of names) {
    Object.defineProperty(broken.prototype, name, {
      value:
        mode === "throw"
          ? async () => {
              throw new Error(
                `local runtime: Durable Object binding ${bindingName} is broken on purpose ` +
                  `(brokenDurableObjects: "throw"), call ${name}()`,
              );
            }
          : hangForever,
      configurable: true,
      writable: true,
    });
  }
  return broken;
}
