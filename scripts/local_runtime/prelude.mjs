// Evaluated before Pyodide's own modules: ES module imports run in source order, and
// pyodide.mjs decides which runtime it is in while it is being evaluated.
//
// Each global below exists only for the boot; host.mjs calls `restoreBootGlobals()` once
// Pyodide and the Python Worker are loaded, so the Python code runs against the same global
// scope workerd gives a production Worker.
//
// - importScripts: pyodide.mjs picks its web-worker branch only if `importScripts` is a
//   function; workerd has none, and without a branch pyodide.mjs throws
//   "Cannot determine runtime environment". It is never called (pyodide.asm.js is imported
//   statically, so `_createPyodideModule` already exists).
// - location: Emscripten reads `self.location.href` in a worker, and pyodide.mjs resolves its
//   file URLs against `location`.
// - setImmediate / clearImmediate: without them Emscripten installs its own polyfill with
//   `addEventListener("message", ..., true)`, which workerd rejects ("useCapture must be false").
//   From compatibility date 2026-08-04 (nodejs_compat by default) workerd has its own.
// - process, hidden: from 2026-08-04 workerd defines a Node-like `process`; Pyodide and
//   Emscripten then take their Node branch ("require is not defined" on 0.28, "The
//   process.binding method is not implemented" on 314). Put back after the boot.
// - WebAssembly.compile / WebAssembly.instantiate, synchronous: Pyodide 314 compiles a small
//   wasm module (its JS error helper) while pyodide.mjs is being evaluated, and at global
//   scope workerd never settles the asynchronous compile ("Top-level await in module is
//   unsettled"). `new WebAssembly.Module` / `Instance` are allowed there.

const BOOT_ORIGIN = "https://pyodide.edge-limiter.invalid/";

const restorers = [];

function defineForBoot(name, value) {
  if (name in globalThis) {
    return;
  }
  Object.defineProperty(globalThis, name, { value, configurable: true, writable: true });
  restorers.push(() => delete globalThis[name]);
}

/** Puts `value` in place of `target[name]` until restoreBootGlobals(). */
function replaceForBoot(target, name, value) {
  const own = Object.getOwnPropertyDescriptor(target, name);
  if (own && !own.configurable) {
    throw new Error(`local runtime: cannot replace ${name} for the boot (not configurable)`);
  }
  Object.defineProperty(target, name, { value, configurable: true, writable: true });
  restorers.push(() => (own ? Object.defineProperty(target, name, own) : delete target[name]));
}

function instantiateNow(source, imports) {
  if (source instanceof WebAssembly.Module) {
    return new WebAssembly.Instance(source, imports);
  }
  const module = new WebAssembly.Module(source);
  return { module, instance: new WebAssembly.Instance(module, imports) };
}

defineForBoot("importScripts", () => {
  throw new Error("importScripts is not available in workerd");
});
defineForBoot("location", new URL(BOOT_ORIGIN));
defineForBoot("setImmediate", (callback, ...args) => setTimeout(callback, 0, ...args));
defineForBoot("clearImmediate", (handle) => clearTimeout(handle));
if ("process" in globalThis) {
  replaceForBoot(globalThis, "process", undefined);
}
replaceForBoot(WebAssembly, "compile", async (bytes) => new WebAssembly.Module(bytes));
replaceForBoot(WebAssembly, "instantiate", async (source, imports) => instantiateNow(source, imports));

/** The origin Pyodide's file URLs are built from during the boot. */
export const bootOrigin = BOOT_ORIGIN;

/** Undoes what this module did to the global scope. */
export function restoreBootGlobals() {
  for (const restore of restorers.splice(0).reverse()) {
    restore();
  }
}
