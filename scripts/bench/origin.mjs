// The benchmarks' origin: a keep-alive Node HTTP server that answers every request at once
// with a small body, so the origin is never what a benchmark measures (its own ceiling is
// the `origin` row of every table). Prints `ORIGIN http://127.0.0.1:<port>` when listening.
//
//   node scripts/bench/origin.mjs [--port 0]
import http from "node:http";

const port = Number(process.argv[process.argv.indexOf("--port") + 1] || 0) || 0;
const body = Buffer.from("ok\n");
// Heads up to 128 KiB (Node's default is 16 KiB): a client's large fields reach the
// origin, so a test of the gateway with them tests the gateway, not this server's refusal.
const server = http.createServer({ maxHeaderSize: 128 * 1024 }, (req, res) => {
  req.resume();
  req.on("end", () => {
    res.writeHead(200, {
      "content-type": "text/plain",
      "content-length": body.length,
      "x-demo-origin": "bench",
    });
    res.end(body);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`ORIGIN http://127.0.0.1:${server.address().port}\n`);
});
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => process.exit(0));
}
