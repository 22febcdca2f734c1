#!/usr/bin/env node
// A small closed-loop HTTP load generator for the benchmarks: keep-alive connections,
// a fixed number of requests, a fixed number in flight. Prints one JSON line:
//   {"requests", "seconds", "rps", "p50", "p90", "p99", "max", "statuses": {...}}
// Latencies are milliseconds. Loopback only in this project's use.
//
//   node scripts/load.mjs URL [--requests N] [--concurrency C] [--warmup N]
//                             [--method M] [--header "name: value"]... [--rate R]
//                             [--duration S] [--header-lines "name: FILE"]
//
// --rate R spreads the requests over time (R per second in total, open loop on a timer)
// instead of sending the next one as soon as one finishes. --duration S stops a closed loop
// after S seconds instead of after N requests. --header-lines "name: FILE" sends each
// request (warm-up ones too) with the next line of FILE as that header's value, in order
// and then over again: a token of its own per request, say.
import { readFileSync } from "node:fs";
import http from "node:http";

function parseArgs(argv) {
  const opts = {
    requests: 1000,
    concurrency: 10,
    warmup: 20,
    method: "GET",
    headers: {},
    rate: 0,
    duration: 0,
  };
  const rest = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => argv[++i];
    if (arg === "--requests") opts.requests = Number(value());
    else if (arg === "--concurrency") opts.concurrency = Number(value());
    else if (arg === "--warmup") opts.warmup = Number(value());
    else if (arg === "--method") opts.method = value();
    else if (arg === "--rate") opts.rate = Number(value());
    else if (arg === "--duration") opts.duration = Number(value());
    else if (arg === "--header-lines") {
      const [name, ...parts] = value().split(":");
      const values = readFileSync(parts.join(":").trim(), "utf8").split("\n").filter(Boolean);
      opts.lines = { name: name.trim(), values, next: 0 };
    } else if (arg === "--header") {
      const [name, ...parts] = value().split(":");
      opts.headers[name.trim()] = parts.join(":").trim();
    } else rest.push(arg);
  }
  const usage =
    "usage: node scripts/load.mjs URL [--requests N] [--concurrency C] [--warmup N]\n" +
    "         [--method M] [--header 'name: value']... [--rate R] [--duration S]\n" +
    "         [--header-lines 'name: FILE']\n";
  if (rest.includes("--help") || rest.includes("-h")) {
    process.stdout.write(usage);
    process.exit(0);
  }
  if (rest.length !== 1) {
    process.stderr.write(usage);
    process.exit(2);
  }
  try {
    opts.url = new URL(rest[0]);
  } catch {
    process.stderr.write(`not a URL: ${rest[0]}\n${usage}`);
    process.exit(2);
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const agent = new http.Agent({ keepAlive: true, maxSockets: opts.concurrency });
const statuses = {};

function request() {
  return new Promise((resolve) => {
    let headers = opts.headers;
    const lines = opts.lines;
    if (lines && lines.values.length) {
      headers = { ...headers, [lines.name]: lines.values[lines.next++ % lines.values.length] };
    }
    const started = performance.now();
    const req = http.request(
      opts.url,
      { method: opts.method, headers, agent },
      (res) => {
        res.resume();
        res.on("end", () => resolve([res.statusCode, performance.now() - started]));
      },
    );
    req.on("error", () => resolve(["error", performance.now() - started]));
    req.end();
  });
}

async function closedLoop(total, inFlight, record, until = Infinity) {
  let next = 0;
  async function worker() {
    while (next < total && performance.now() < until) {
      next++;
      const [status, ms] = await request();
      record(status, ms);
    }
  }
  await Promise.all(Array.from({ length: Math.min(inFlight, total) }, worker));
}

async function openLoop(total, rate, record) {
  const pending = [];
  const started = performance.now();
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(request().then(([status, ms]) => record(status, ms)));
  }
  await Promise.all(pending);
}

await closedLoop(opts.warmup, Math.min(opts.concurrency, opts.warmup || 1), () => {});
const latencies = [];
const record = (status, ms) => {
  statuses[status] = (statuses[status] ?? 0) + 1;
  latencies.push(ms);
};
const t0 = performance.now();
if (opts.rate > 0) await openLoop(opts.requests, opts.rate, record);
else if (opts.duration > 0) {
  const until = t0 + opts.duration * 1000;
  await closedLoop(Infinity, opts.concurrency, record, until);
} else await closedLoop(opts.requests, opts.concurrency, record);
const seconds = (performance.now() - t0) / 1000;
latencies.sort((a, b) => a - b);
const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * q))];
process.stdout.write(
  JSON.stringify({
    requests: latencies.length,
    seconds,
    rps: latencies.length / seconds,
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    max: latencies[latencies.length - 1],
    statuses,
  }) + "\n",
);
agent.destroy();
