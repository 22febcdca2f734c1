"""The platform adapter (``edge_limiter.platform``) on npm Pyodide 0.28.2 in Node.

The adapter only runs inside the runtime, so CPython cannot import it. Here it runs on the
Pyodide production uses (loaded by ``scripts/bench/pyodide_app.mjs``), against real JavaScript ``Request``/``Response``/``Headers`` and
timers (Node's), one program per test, its results printed as JSON: the conversions and
the deadline of a runtime call, each checked without booting workerd.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from edge_limiter.tools.toolchain import node

ROOT = Path(__file__).resolve().parents[2]
NODE = node()

pytestmark = pytest.mark.e2e

RUNNER = """
import { loadWorkerApp } from "./scripts/bench/pyodide_app.mjs";
const pyodide = await loadWorkerApp();
pyodide.globals.set("program", process.env.PROGRAM);
const result = await pyodide.runPythonAsync(`
namespace = {}
exec(program, namespace)
await namespace["main"]()
`);
process.stdout.write(`${result}\\n`);
"""


def run(program: str) -> Any:
    """Run ``program`` (defines ``async def main()`` returning JSON text) on Pyodide."""
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", RUNNER],
        cwd=ROOT,
        env={**os.environ, "PROGRAM": textwrap.dedent(program)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_runtime_call_answers_or_times_out_and_leaves_nothing_behind() -> None:
    result = run(
        """
        import asyncio, json
        import js
        from pyodide.ffi import create_proxy
        from edge_limiter.platform import convert as bindings  # within lives there

        async def main():
            out = {"value": await bindings.within(js.Promise.resolve("ok"), 1000)}
            never = js.Promise.new(create_proxy(lambda resolve, reject: None))
            try:
                await bindings.within(never, 20)
                out["timed_out"] = False
            except TimeoutError as exc:
                out["timed_out"] = str(exc)
            out["failed"] = None
            try:
                await bindings.within(js.Promise.reject(js.Error.new("boom")), 1000)
            except Exception as exc:
                out["failed"] = type(exc).__name__ + ": " + str(exc)
            out["waiting"] = len(bindings._waiting)
            # Entries of calls the runtime abandoned (never resumed) go on the next pass.
            loop = asyncio.get_event_loop()
            for old in range(3):
                bindings._waiting[old] = loop.create_future()
            start = bindings._PRUNE_AFTER + bindings._PRUNE_EVERY
            bindings._numbers = iter(range(start, start + 10))
            out["before_prune"] = len(bindings._waiting)
            out["value_at_prune"] = await bindings.within(js.Promise.resolve(7), 1000)
            out["after_prune"] = len(bindings._waiting)
            return json.dumps(out)
        """
    )
    assert result["value"] == "ok" and result["value_at_prune"] == 7
    assert result["timed_out"] == "no answer within 20 ms"
    assert result["failed"].startswith("JsException") and "boom" in result["failed"]
    assert result["waiting"] == 0
    assert result["before_prune"] == 3 and result["after_prune"] == 0


def test_an_origin_answer_is_rebuilt_once_keeping_its_status_line_and_body() -> None:
    result = run(
        """
        import json
        import js
        from pyodide.ffi import to_js
        from edge_limiter.core.http.messages import Response
        from edge_limiter.platform.convert import JsBody, JsHeaders, globals_, to_js_response

        def fetched(text):
            init = js.Object.new()
            init.status = 201
            init.statusText = "Made It"
            init.headers = to_js([["content-type", "text/plain"], ["x-a", "1"]])
            return js.Response.new(text, init)

        def wrap(answer):
            body = JsBody(answer)
            return Response(201, JsHeaders.of_response(answer, body, 201), body, answer)

        async def described(answer):
            headers = dict(js.Array.from_(answer.headers.entries()).to_py())
            return [answer.status, answer.statusText, headers, await answer.text()]

        async def main():
            out = {"at_import": sorted(vars(globals_))}
            # Untouched: the runtime's own response goes back.
            answer = fetched("plain")
            out["same_object"] = to_js_response(wrap(answer)) is answer
            # A field added: one rebuilt response with everything else the origin's.
            answer = fetched("hello")
            response = wrap(answer)
            response.headers.set("X-Origin", "eu")
            response.headers.set("X-B", "2")
            out["get_after_set"] = response.headers.get("x-origin")
            out["rebuilt"] = await described(to_js_response(response))
            # The body read after the change (a cache stores it): read from the rebuilt one.
            answer = fetched("stored")
            response = wrap(answer)
            response.headers.set("X-Origin", "us")
            out["read"] = (await response.body.read()).decode()
            out["after_read"] = await described(to_js_response(response))
            # The body read before any change: the fields are copied instead.
            answer = fetched("early")
            response = wrap(answer)
            out["read_first"] = (await response.body.read()).decode()
            response.headers.set("X-Origin", "ap")
            out["copied"] = await described(to_js_response(response))
            # Another status: a new response, the origin's fields and body.
            answer = fetched("other")
            response = wrap(answer)
            response.headers.set("X-Origin", "eu")
            response.status = 203
            out["restatused"] = await described(to_js_response(response))
            return json.dumps(out)
        """
    )
    # Nothing looked up at import: the local host has boot stand-ins for some globals then.
    assert result["at_import"] == []
    assert result["same_object"] is True
    assert result["get_after_set"] == "eu"
    fields = {"content-type": "text/plain", "x-a": "1"}
    assert result["rebuilt"] == [201, "Made It", {**fields, "x-origin": "eu", "x-b": "2"}, "hello"]
    assert result["read"] == "stored"
    assert result["after_read"][0] == 201 and result["after_read"][3] == "stored"
    assert result["after_read"][2] == {**fields, "x-origin": "us"}
    assert result["read_first"] == "early"
    assert result["copied"][:2] == [201, "Made It"] and result["copied"][3] == "early"
    assert result["copied"][2] == {**fields, "x-origin": "ap"}
    assert result["restatused"][0] == 203 and result["restatused"][3] == "other"
    assert result["restatused"][2] == {**fields, "x-origin": "eu"}


def test_a_bounded_read_measures_without_buffering_and_keeps_the_body_whole() -> None:
    result = run(
        """
        import json
        import js
        from pyodide.code import run_js
        from edge_limiter.core.http.messages import Response
        from edge_limiter.platform.convert import JsBody, JsHeaders, to_js_response

        # A body of `chunks` chunks of `size` bytes, streamed (no Content-Length), with
        # the fields given; `pulled()` says how many chunks were pulled from the source.
        streamed = run_js('''
        (() => {
          let pulled = 0;
          const make = (chunks, size, fields, status) => {
            let sent = 0;
            const stream = new ReadableStream({
              pull(controller) {
                if (sent === chunks) { controller.close(); return; }
                sent += 1; pulled += 1;
                controller.enqueue(new Uint8Array(size).fill(97 + (sent % 26)));
              },
            }, { highWaterMark: 0 });
            return new Response(stream, { status, statusText: "Streamed", headers: fields });
          };
          make.pulled = () => pulled;
          return make;
        })()
        ''')

        def wrap(answer):
            body = JsBody(answer)
            status = int(answer.status)
            return Response(status, JsHeaders.of_response(answer, body, status), body, answer)

        async def sent(response):
            answer = to_js_response(response)
            data = bytes((await answer.arrayBuffer()).to_bytes())
            fields = dict(js.Array.from_(answer.headers.entries()).to_py())
            return [answer.status, answer.statusText, len(data), data[:3].decode(), fields]

        async def main():
            out = {}
            # Known length within the limit: read whole.
            known = wrap(js.Response.new("x" * 100, js.JSON.parse('{"headers": {"content-length": "100"}}')))
            out["known_fits"] = len(await known.read_body_at_most(100))
            # Known length above it: not read at all, and still sent whole.
            known = wrap(js.Response.new("x" * 101, js.JSON.parse('{"headers": {"content-length": "101"}}')))
            out["known_over"] = await known.read_body_at_most(100)
            out["known_over_sent"] = await sent(known)
            # Streamed, within the limit: read whole, sent from the bytes.
            small = wrap(streamed(4, 1000, js.JSON.parse('{"x-a": "1"}'), 201))
            out["streamed_fits"] = len(await small.read_body_at_most(4000))
            out["streamed_fits_sent"] = await sent(small)
            # Streamed, above the limit: measured as far as the limit, then sent whole,
            # with the origin's status line and fields (and a field set after).
            before = streamed.pulled()
            big = wrap(streamed(50, 1000, js.JSON.parse('{"x-a": "1"}'), 202))
            out["streamed_over"] = await big.read_body_at_most(4000)
            out["pulled_to_decide"] = streamed.pulled() - before
            big.headers.set("X-Origin", "eu")
            out["streamed_over_sent"] = await sent(big)
            # A Content-Length beside a Content-Encoding is not the decoded length.
            coded = wrap(streamed(5, 1000, js.JSON.parse('{"content-length": "10", "content-encoding": "gzip"}'), 200))
            out["encoded_over"] = await coded.read_body_at_most(4000)
            # A request's streamed body: measured the same way.
            init = js.JSON.parse('{"method": "POST", "duplex": "half"}')
            init.body = streamed(3, 1000, js.Object.new(), 200).body
            request_body = JsBody(js.Request.new("https://api.test/x", init))
            out["request_over"] = await request_body.read_at_most(2999)
            return json.dumps(out)
        """
    )
    assert result["known_fits"] == 100
    assert result["known_over"] is None
    assert result["known_over_sent"][2:4] == [101, "xxx"]
    assert result["streamed_fits"] == 4000
    assert result["streamed_fits_sent"][:3] == [201, "Streamed", 4000]
    assert result["streamed_over"] is None
    # Deciding took about the limit's worth of chunks, not the whole body.
    assert result["pulled_to_decide"] <= 6
    status, reason, length, first, fields = result["streamed_over_sent"]
    assert [status, reason, length, first] == [202, "Streamed", 50_000, "b" * 3]
    assert fields["x-a"] == "1" and fields["x-origin"] == "eu"
    assert result["encoded_over"] is None
    assert result["request_over"] is None


def test_discard_removes_the_named_fields_present_and_copies_only_then() -> None:
    result = run(
        """
        import json
        import js
        from pyodide.ffi import to_js
        from edge_limiter.platform.convert import JsHeaders

        async def main():
            original = js.Headers.new(
                to_js(
                    [
                        ["X-Forwarded-Host", "evil"],
                        ["X_Forwarded_Host", "evil"],
                        ["X_Forwarded_Proto", "http"],
                        ["X-Forwarded-Proto", "https"],
                        ["X-Kept", "1"],
                    ]
                )
            )
            headers = JsHeaders(original)
            headers.discard(
                frozenset({"x-forwarded-host", "forwarded", "expect"}),
                frozenset({"x-forwarded-proto"}),
            )
            fields = js.Headers.new(to_js([["x-kept", "1"]]))
            untouched = JsHeaders(fields)
            untouched.discard(frozenset({"forwarded", "expect"}))
            return json.dumps({
                "left": headers.items(),
                "original": js.Array.from_(original.entries()).to_py(),
                "copied": headers.js is not original,
                "untouched_copied": untouched.js is not fields,
            })
        """
    )
    # Any spelling of a dropped field goes; of a field the gateway sets, the "_" ones.
    assert result["left"] == [["x-forwarded-proto", "https"], ["x-kept", "1"]]
    # The runtime's own object is never changed: the fields were copied first.
    assert len(result["original"]) == 5
    assert result["copied"] is True
    assert result["untouched_copied"] is False  # nothing to remove: nothing copied


def test_a_hold_keeps_what_it_hands_the_runtime_pending_until_released() -> None:
    # Exchange.finish holds a request with a promise handed to ctx.waitUntil: pending
    # until the work's end releases it, whichever way it is made (Promise.withResolvers,
    # which workerd has and Node 20 has not, or a Python future).
    result = run(
        """
        import asyncio, json
        import js
        from pyodide.ffi import create_proxy
        from edge_limiter.platform import bindings

        js.eval(
            "Promise.withResolvers ??= function () { let resolve, reject;"
            " const promise = new Promise((a, b) => { resolve = a; reject = b; });"
            " return { promise, resolve, reject }; }"
        )

        async def settled(awaitable):
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.ensure_future(awaitable)), 0.05)
            except TimeoutError:
                return False
            return True

        async def main():
            out = {}
            for resolvers in (True, False):
                bindings._with_resolvers = resolvers
                handed = []
                ctx = js.Object.new()
                ctx.waitUntil = create_proxy(handed.append)
                release = bindings.WaitUntil(ctx).hold()
                held = handed[0]
                before = await settled(held)
                release()
                out[str(resolvers)] = [len(handed), before, await settled(held)]
            return json.dumps(out)
        """
    )
    assert result == {"True": [1, False, True], "False": [1, False, True]}


def test_webcrypto_verifies_every_algorithms_tokens_and_refuses_tampered_ones() -> None:
    # Tokens minted by PyJWT (a maintained library) for each algorithm the gateway takes,
    # verified by the adapter with the runtime's WebCrypto (Node's here, workerd's in the
    # end-to-end tests): each valid one passes, each with a flipped byte fails.
    import sys

    sys.path.insert(0, str(ROOT))
    from tests.core.identity_keys import ALGS, signer

    cases = {alg: (signer(alg).token(kid="k"), signer(alg).public_jwk) for alg in ALGS}
    program = """
        import json
        from edge_limiter.core.identity.keys import parse_jwk
        from edge_limiter.core.identity.tokens import parse_token
        from edge_limiter.platform.crypto import WebCryptoVerifier

        CASES = json.loads(CASES_TEXT)

        async def main():
            verifier = WebCryptoVerifier()
            out = {}
            for alg, (text, jwk) in CASES.items():
                token = parse_token(text)
                key = parse_jwk(jwk)
                good = await verifier.verify(alg, key, token.signing_input, token.signature)
                again = await verifier.verify(alg, key, token.signing_input, token.signature)
                flipped = bytes([token.signature[0] ^ 1]) + token.signature[1:]
                bad = await verifier.verify(alg, key, token.signing_input, flipped)
                other = await verifier.verify(alg, key, token.signing_input + b"x", token.signature)
                out[alg] = [good, again, bad, other]
            return json.dumps(out)
        """
    result = run(f"CASES_TEXT = {json.dumps(cases)!r}\n" + textwrap.dedent(program))
    assert result == {alg: [True, True, False, False] for alg in ALGS}
