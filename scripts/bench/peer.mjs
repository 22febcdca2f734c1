// The benchmarks' JavaScript peers, run in the same workerd as the Python gateway
// (launch.mjs `peers`), so every ratio in BENCHMARKS.md compares like with like.
//
//   GET /forward/...   fetch the origin (env.ORIGIN) with the request as it came: the floor
//                      any Worker in front of an API pays
//   GET /limited/...   one call to PeerLimiter (below), then forward: what a JavaScript
//                      rate-limiting gateway pays for an admitted request
//   GET /object        one call to PeerLimiter; its answer is the response
//   GET /python-object one call to the project's own RateLimiter object (the Python Worker's
//                      class, bound here), with the same payload: the object driven exactly
//                      as the JavaScript one is
//   GET /python-object-behind  the same with env.PAYLOAD_BEHIND: the route opted into
//                      write-behind (not the same work: shown beside, not compared)
//   GET /floor-object  one call to FloorLimiter (runtime.py FLOOR_PYTHON, when bound): the
//                      same read-modify-write as PeerLimiter in minimal Python, the floor of
//                      any Python Durable Object doing this work on the same workerd
//   GET /floor-nothing one call to FloorLimiter.nothing: entering the Python object alone
//
// env.PAYLOAD is the store request text the gateway sends for the benchmark's route
// (quota, window, cost), so both objects decide the same thing. `?key=` picks the object.
//
// PeerLimiter does the same work per request as the Python object: rows read once and kept
// in memory, a token-bucket decision in exact integers, the changed row written with an
// upsert before the answer (the platform holds the answer until the write is durable).
import { DurableObject } from "cloudflare:workers";

const UPSERT =
  "INSERT INTO limits (id, state, idle_at) VALUES (?, ?, ?) " +
  "ON CONFLICT(id) DO UPDATE SET state = excluded.state, idle_at = excluded.idle_at";

export class PeerLimiter extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(
      "CREATE TABLE IF NOT EXISTS limits (id TEXT PRIMARY KEY, state TEXT NOT NULL, idle_at INTEGER NOT NULL)",
    );
    this.rows = null;
    this.parsed = new Map();
  }

  decide(payload) {
    let request = this.parsed.get(payload);
    if (request === undefined) {
      const data = JSON.parse(payload);
      request = {
        cost: data.cost,
        limits: data.limits.map(([quota, window, , burst]) => ({
          id: `token_bucket:${burst ?? ""}:${quota}/${window}`,
          quota,
          window,
          full: (burst ?? quota) * window,
        })),
      };
      this.parsed.set(payload, request);
    }
    if (this.rows === null) {
      this.rows = new Map();
      for (const row of this.sql.exec("SELECT id, state FROM limits")) {
        this.rows.set(row.id, JSON.parse(row.state));
      }
    }
    const now = Date.now();
    const decisions = [];
    const updates = [];
    let allowed = true;
    for (const limit of request.limits) {
      const stored = this.rows.get(limit.id);
      let level = limit.full;
      if (stored !== undefined) {
        level = Math.min(limit.full, stored[0] + Math.max(0, now - stored[1]) * limit.quota);
      }
      const need = request.cost * limit.window;
      const ok = need <= level;
      allowed &&= ok;
      const after = ok ? level - need : level;
      const resetAfter = Math.ceil((limit.full - after) / limit.quota);
      const retryAfter = ok ? 0 : Math.max(1, Math.ceil((need - level) / limit.quota));
      decisions.push(
        `[${ok},${limit.full / limit.window},${Math.floor(after / limit.window)},${resetAfter},${retryAfter}]`,
      );
      updates.push([limit, after, now + resetAfter]);
    }
    if (allowed) {
      for (const [limit, after, idleAt] of updates) {
        const state = [after, now];
        this.rows.set(limit.id, state);
        this.sql.exec(UPSERT, limit.id, JSON.stringify(state), idleAt);
      }
    }
    return `{"ds":[${decisions.join(",")}]}`;
  }
}

async function forward(request, env, path) {
  const url = new URL(request.url);
  return fetch(new Request(env.ORIGIN + path + url.search, request), { redirect: "manual" });
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const key = url.searchParams.get("key") ?? "bench";
    const path = url.pathname;
    if (path === "/object") {
      return new Response(await env.PEER_LIMITER.getByName(key).decide(env.PAYLOAD));
    }
    if (path === "/python-object") {
      return new Response(await env.RATE_LIMITER.getByName(key).decide(env.PAYLOAD));
    }
    if (path === "/python-object-behind") {
      return new Response(await env.RATE_LIMITER.getByName(key).decide(env.PAYLOAD_BEHIND));
    }
    if (path === "/floor-object") {
      return new Response(await env.FLOOR_LIMITER.getByName(key).decide(env.PAYLOAD));
    }
    if (path === "/floor-nothing") {
      return new Response(await env.FLOOR_LIMITER.getByName(key).nothing(env.PAYLOAD));
    }
    if (path.startsWith("/limited/")) {
      await env.PEER_LIMITER.getByName(key).decide(env.PAYLOAD);
      return forward(request, env, path.slice("/limited".length));
    }
    if (path.startsWith("/forward/")) {
      return forward(request, env, path.slice("/forward".length));
    }
    return new Response("not found", { status: 404 });
  },
};
