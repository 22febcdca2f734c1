#!/usr/bin/env node
// Classifies results of the HTTP cache test suite (npm `http-cache-tests`) with the suite's
// own rules: `determineTestResult` of its lib/display.mjs, the function its CLI and
// cache-tests.fyi use, over the test definitions of the same package (cli.mjs's list: the
// suite's tests/index.mjs plus its surrogate-control tests). Running the suite's code keeps
// the counts comparable with the published ones: kinds, `depends_on` chains and setup
// failures are read where the suite defines them, never re-typed.
//
//   node scripts/cache_suite_summary.mjs SUITE_DIR [--peers] [NAME=RESULTS.json]...
//
// --peers adds the published results of every shared cache the package ships (the entries of
// its results/index.mjs that are not browsers), each named by its file's stem.
//
// Prints one JSON object:
//   "tests":   [{id, name, suite, kind (required, optimal or check), depends_on}]
//   "peers":   [{key, name, version, type}] (with --peers)
//   "results": {NAME: {test id: {result, own, detail}}}
// where result is one of pass, fail, optional_fail, yes, no, setup_fail, harness_fail,
// dependency_fail, retry, untested; own is the result the test's own requests came to, had
// its dependencies passed (the same function with honorDependencies off: what a dependency
// failure hides); detail is the suite's message, or null.
import { readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const suiteDir = args.shift();
if (!suiteDir) {
  console.error("usage: cache_suite_summary.mjs SUITE_DIR [--peers] [NAME=RESULTS.json]...");
  process.exit(2);
}
const withPeers = args[0] === "--peers";
if (withPeers) args.shift();
const load = (rel) => import(pathToFileURL(path.join(path.resolve(suiteDir), rel)).href);

const suites = (await load("tests/index.mjs")).default;
const surrogate = (await load("tests/surrogate-control.mjs")).default;
const display = await load("lib/display.mjs");
// cli.mjs runs the surrogate tests too (and index.mjs leaves them out): the same list.
const testSuites = [...suites, surrogate];

// display.mjs's result types hold [icon, colour, symbol]; map the symbols back to names.
const byName = {
  "✅": "pass",
  "⛔️": "fail",
  "⚠️": "optional_fail",
  Y: "yes",
  N: "no",
  "🔹": "setup_fail",
  "⁉️": "harness_fail",
  "⚪️": "dependency_fail",
  "↻": "retry",
  "-": "untested",
};

function resultName(resultType, id) {
  const kind = byName[resultType[2]];
  if (kind === undefined) throw new Error(`unknown result symbol ${resultType[2]} for ${id}`);
  return kind;
}

const tests = [];
for (const suite of testSuites) {
  for (const test of suite.tests) {
    // The CLI never runs browser-only tests (client/runner.mjs): a proxy is not asked them.
    if (test.browser_only === true) continue;
    tests.push({
      id: test.id,
      name: test.name,
      suite: suite.id,
      kind: test.kind ?? "required",
      depends_on: test.depends_on ?? [],
    });
  }
}

const files = [];
const peers = [];
if (withPeers) {
  for (const item of (await load("results/index.mjs")).default) {
    if (item.type === "browser") continue;
    const key = item.file.replace(/\.json$/, "");
    peers.push({ key, name: item.name, version: item.version ?? "", type: item.type });
    files.push([key, path.join(suiteDir, "results", item.file)]);
  }
}
for (const item of args) {
  const at = item.indexOf("=");
  if (at < 1) throw new Error(`expected NAME=RESULTS.json, got ${item}`);
  files.push([item.slice(0, at), item.slice(at + 1)]);
}

const results = {};
for (const [name, file] of files) {
  const raw = JSON.parse(readFileSync(file, "utf8"));
  const out = {};
  for (const test of tests) {
    const value = raw[test.id];
    out[test.id] = {
      result: resultName(display.determineTestResult(testSuites, test.id, raw), test.id),
      own: resultName(display.determineTestResult(testSuites, test.id, raw, false), test.id),
      detail: Array.isArray(value) ? String(value[1] ?? "") : null,
    };
  }
  results[name] = out;
}

process.stdout.write(JSON.stringify({ tests, peers, results }));
