// Loaded with `node --import` before the HTTP cache test suite's server and client
// (edge_limiter.tools.cache_suite): takes connection reuse out of the measurement, changing no
// field any test sends or checks (the gateway drops `Connection`, a hop-by-hop field).
//
// - The client (node-fetch 2 over Node's global agent) would keep its connections to the
//   gateway alive (Node 19+ agents do by default; the suite was written before); when the
//   runtime closes an idle one as the next request goes out, the client sees ECONNRESET and
//   the suite counts the test as failed. Here: one connection per request, as with the Node
//   versions the published results were made with.
// - The server answers every request with `Connection: close`. Kept alive, its connections
//   fail requests in two ways that say nothing of a cache: Node closes one after 5 s idle,
//   and a request the runtime sends on it in that instant is lost ("Network connection
//   lost"); and the `headers-store-Transfer-Encoding` test's answer has a body with no
//   framing (an unknown transfer coding), so its bytes are read as the status line of the
//   next answer on that connection ("Invalid response status line"). The suite's pool never
//   retries, so either came to a 502 for another test. One test sets its own `Connection`
//   field, which keeps that connection alive: the server then never closes it first.
import http from "node:http";

http.globalAgent = new http.Agent({ keepAlive: false });

const createServer = http.createServer;
http.createServer = function createServerClosingEachConnection(...args) {
  const server = createServer.apply(this, args);
  server.keepAliveTimeout = 0;
  server.prependListener("request", (_request, response) => {
    response.shouldKeepAlive = false;
  });
  return server;
};

// The suite's server lives as long as the script that started it: it holds the server's
// stdin open and never writes, so its end (that script gone, even killed) ends the server.
if (process.env.CACHE_SUITE_EXIT_WITH_STDIN === "1") {
  process.stdin.on("end", () => process.exit(0));
  process.stdin.resume();
}
