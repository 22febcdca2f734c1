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

const BOOT_ORIGIN = "https://pyodide.edge-limiter.invalid/";

const added = [];

function defineForBoot(name, value) {
  if (name in globalThis) {
    return;
  }
  Object.defineProperty(globalThis, name, { value, configurable: true, writable: true });
  added.push(name);
}

defineForBoot("importScripts", () => {
  throw new Error("importScripts is not available in workerd");
});
defineForBoot("location", new URL(BOOT_ORIGIN));
defineForBoot("setImmediate", (callback, ...args) => setTimeout(callback, 0, ...args));
defineForBoot("clearImmediate", (handle) => clearTimeout(handle));

/** The origin Pyodide's file URLs are built from during the boot. */
export const bootOrigin = BOOT_ORIGIN;

/** Removes the globals this module added. */
export function restoreBootGlobals() {
  for (const name of added.splice(0)) {
    delete globalThis[name];
  }
}
