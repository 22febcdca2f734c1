// What launch.mjs relies on inside Miniflare, checked at every launch: a Miniflare release
// that changes one of these fails the launch with an error naming it, instead of a runtime
// that silently differs (state not persisted, the Worker's console lost, workerd orphaned).
//
// Miniflare 5 takes a new option shape (`workers: [{config: {name, manifest, env, exports},
// dev}]`); launch.mjs writes the v4 shape, which Miniflare 5 still documents and converts
// with `convertV4MiniflareOptions`. The converter drops options it no longer knows without a
// word (zod strip): it dropped `handleRuntimeStdio`, `durableObjectsPersist` and `kvPersist`,
// which became `handleStructuredLogs` and `resourcePersistencePath`. So every option
// launch.mjs sets is looked for in the converted options.

const REQUIRED_EXPORTS = ["Miniflare", "Log", "LogLevel", "convertV4MiniflareOptions"];
const REQUIRED_METHODS = ["unsafeGetDirectURL", "dispose"];
// The module types launch.mjs passes, as Miniflare 5's manifest names them.
const MODULE_TYPES = { ESModule: "esm", Text: "text", Data: "data", CompiledWasm: "wasm" };
// The signals Miniflare hooks to kill workerd on exit; launch.mjs replaces these hooks.
export const REPLACED_SIGNALS = ["SIGTERM", "SIGINT", "SIGHUP"];

export class MiniflareContractError extends Error {
  constructor(version, problems) {
    super(
      `miniflare ${version} no longer does what the local runtime relies on ` +
        `(scripts/local_runtime/miniflare_contract.mjs):\n  - ${problems.join("\n  - ")}`,
    );
    this.name = "MiniflareContractError";
  }
}

/** Throws unless the `miniflare` module has the exports and methods launch.mjs calls. */
export function checkMiniflareModule(miniflare, version) {
  const problems = REQUIRED_EXPORTS.filter((name) => miniflare[name] === undefined).map(
    (name) => `it exports no ${name}`,
  );
  const prototype = miniflare.Miniflare?.prototype ?? {};
  for (const name of REQUIRED_METHODS) {
    if (typeof prototype[name] !== "function") {
      problems.push(`Miniflare has no method ${name}()`);
    }
  }
  if (problems.length > 0) {
    throw new MiniflareContractError(version, problems);
  }
}

function expectEqual(problems, where, actual, expected) {
  if (JSON.stringify(actual) !== JSON.stringify(expected)) {
    problems.push(`${where}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
  }
}

function checkWorker(problems, index, v4, converted) {
  const where = `workers[${index}] (${v4.name})`;
  const config = converted?.config;
  if (!config) {
    problems.push(`${where}: no config after conversion`);
    return;
  }
  expectEqual(problems, `${where}.name`, config.name, v4.name);
  expectEqual(problems, `${where}.compatibilityDate`, config.compatibilityDate, v4.compatibilityDate);
  expectEqual(problems, `${where}.compatibilityFlags`, config.compatibilityFlags ?? [], v4.compatibilityFlags ?? []);
  const modules = config.manifest?.modules ?? {};
  expectEqual(problems, `${where} module count`, Object.keys(modules).length, v4.modules.length);
  for (const module of v4.modules) {
    const name = module.path.startsWith(v4.modulesRoot) ? module.path.slice(v4.modulesRoot.length + 1) : module.path;
    expectEqual(problems, `${where} module ${name} type`, modules[name]?.type, MODULE_TYPES[module.type]);
  }
  const env = config.env ?? {};
  for (const [name, value] of Object.entries(v4.bindings ?? {})) {
    const kind = typeof value === "string" ? "text" : "json";
    expectEqual(problems, `${where} var ${name}`, env[name]?.type, kind);
  }
  for (const name of v4.kvNamespaces ?? []) {
    expectEqual(problems, `${where} KV binding ${name}`, env[name]?.type, "kv");
  }
  for (const [name, target] of Object.entries(v4.durableObjects ?? {})) {
    expectEqual(problems, `${where} Durable Object binding ${name}`, [env[name]?.type, env[name]?.exportName], [
      "durable-object",
      target.className,
    ]);
    if (!target.scriptName) {
      // Never ephemeral: Miniflare's in-memory objects silently drop SQLite storage.
      expectEqual(problems, `${where} class ${target.className} storage`, config.exports?.[target.className]?.storage, "sqlite");
    }
  }
  for (const name of Object.keys(v4.analyticsEngineDatasets ?? {})) {
    expectEqual(problems, `${where} Analytics Engine binding ${name}`, env[name]?.type, "analytics-engine-dataset");
  }
  if (v4.unsafeDirectSockets) {
    expectEqual(problems, `${where} direct sockets`, converted.dev?.unsafeDirectSockets, v4.unsafeDirectSockets);
  }
}

/**
 * The Miniflare 5 options for `v4Options` (the v4 shape launch.mjs writes), with every option
 * launch.mjs relies on checked to have survived the conversion.
 */
export function convertedOptions(miniflare, version, v4Options) {
  const converted = miniflare.convertV4MiniflareOptions(v4Options);
  const problems = [];
  for (const name of ["host", "port", "cf", "unsafeTriggerHandlers", "logRequests", "resourcePersistencePath"]) {
    expectEqual(problems, name, converted[name], v4Options[name]);
  }
  if (converted.handleStructuredLogs !== v4Options.handleStructuredLogs) {
    problems.push("handleStructuredLogs (the Worker's console) was dropped");
  }
  if (converted.unsafeHandleRuntimeRestart !== v4Options.unsafeHandleRuntimeRestart) {
    problems.push("unsafeHandleRuntimeRestart (exit when workerd dies) was dropped");
  }
  if (converted.log !== v4Options.log) {
    problems.push("log was dropped");
  }
  // Another Miniflare on this machine (a wrangler dev) must not bind to this one's objects.
  expectEqual(problems, "enableDevRegistry", converted.enableDevRegistry ?? false, false);
  expectEqual(problems, "worker count", converted.workers?.length, v4Options.workers.length);
  v4Options.workers.forEach((worker, index) => checkWorker(problems, index, worker, converted.workers?.[index]));
  if (problems.length > 0) {
    throw new MiniflareContractError(version, problems);
  }
  return converted;
}

/** The signals some listener is registered for, now. */
export function hookedSignals() {
  return new Set(process.eventNames().filter((name) => typeof name === "string" && /^SIG[A-Z0-9]+$/.test(name)));
}

/**
 * Replaces Miniflare's exit hooks with `onSignal`; throws if Miniflare hooked a signal other
 * than those it is known to hook (`before`: the signals hooked before Miniflare started).
 */
export function replaceExitHooks(version, before, onSignal) {
  const unknown = [...hookedSignals()].filter((signal) => !before.has(signal) && !REPLACED_SIGNALS.includes(signal));
  if (unknown.length > 0) {
    throw new MiniflareContractError(version, [
      `it now hooks ${unknown.join(", ")}, which launch.mjs does not replace (it replaces ` +
        `${REPLACED_SIGNALS.join(", ")} so that workerd is disposed, not orphaned)`,
    ]);
  }
  for (const signal of REPLACED_SIGNALS) {
    process.removeAllListeners(signal);
    process.on(signal, () => onSignal(signal));
  }
}
