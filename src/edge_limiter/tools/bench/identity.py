"""The identity section on local workerd: a limited route keyed on a verified token's claim
against the same route keyed on a header (issue 39's goal: a cached token costs at most
0.3 ms more at p50), and the first sight of a token, its signature verified by the
runtime's WebCrypto, for RS256, ES256 and EdDSA.

Both routes count one key under the same limit and algorithm, on the same runtime, one
request at a time. "Cached" sends one token again and again (verified on its first
request, then a lookup by its hash); "first sight" sends a token of its own per request
(``scripts/load.mjs --header-lines``), each signed with the algorithm's key, so each is
parsed and verified before it is counted.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils

from edge_limiter.core.identity.tokens import b64url_encode, encode_segment
from edge_limiter.tools.bench import runtime as rt
from edge_limiter.tools.bench.report import Report
from edge_limiter.tools.bench.runtime import KEY
from edge_limiter.tools.bench.tables import IDENTITY_CACHED, IDENTITY_PEER
from edge_limiter.tools.build_worker import build
from edge_limiter.tools.local_gateway import LocalGateway

ISSUER = "https://bench.invalid/"
ALGORITHMS = ("RS256", "ES256", "EdDSA")
#: The rows' names (the tables and the goal read them).
HEADER_ROW = IDENTITY_PEER
CACHED_ROW = IDENTITY_CACHED


def first_row(alg: str) -> str:
    return f"first sight of a token, {alg} verified"


def _int_bytes(value: int) -> str:
    return b64url_encode(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class Signer:
    """One algorithm's key: its public JWK (for the config) and tokens it signs."""

    def __init__(self, alg: str) -> None:
        self.alg = alg
        jwk: dict[str, str]
        if alg == "RS256":
            self.private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            numbers = self.private.public_key().public_numbers()
            jwk = {"kty": "RSA", "n": _int_bytes(numbers.n), "e": _int_bytes(numbers.e)}
        elif alg == "ES256":
            self.private = ec.generate_private_key(ec.SECP256R1())
            point = self.private.public_key().public_numbers()
            jwk = {
                "kty": "EC",
                "crv": "P-256",
                "x": b64url_encode(point.x.to_bytes(32, "big")),
                "y": b64url_encode(point.y.to_bytes(32, "big")),
            }
        else:
            self.private = ed25519.Ed25519PrivateKey.generate()
            raw = self.private.public_key().public_bytes_raw()
            jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url_encode(raw)}
        self.jwk = {**jwk, "kid": alg, "alg": alg}

    def token(self, claims: dict[str, Any]) -> str:
        head = encode_segment({"alg": self.alg, "kid": self.alg, "typ": "JWT"})
        data = f"{head}.{encode_segment(claims)}".encode()
        if self.alg == "RS256":
            signature = self.private.sign(data, padding.PKCS1v15(), hashes.SHA256())
        elif self.alg == "ES256":
            r, s = utils.decode_dss_signature(self.private.sign(data, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        else:
            signature = self.private.sign(data)
        return f"{data.decode()}.{b64url_encode(signature)}"


def identity_config(origin: str, signers: list[Signer]) -> dict[str, Any]:
    """Two routes alike but for their key: a header, or the verified token's ``sub``."""

    def route(name: str, **fields: Any) -> dict[str, Any]:
        return {
            "name": name,
            "match": {"path": f"/{name}/*"},
            "limits": rt.BENCH_LIMIT,
            "algorithm": "gcra",
            **fields,
        }

    return {
        "origin": origin,
        "auth": {
            "bench": {
                "issuer": ISSUER,
                "algorithms": list(ALGORITHMS),
                "keys": [signer.jwk for signer in signers],
                "required_claims": ["exp", "sub"],
            }
        },
        "routes": [
            route("header", key=f"header:{KEY}"),
            route("claim", key="jwt:sub", auth="bench"),
        ],
    }


def section_identity(report: Report, quick: bool, origin: str) -> None:
    requests = 200 if quick else 1000
    first = 40 if quick else 300
    warmup = 20
    repeat = 1 if quick else 3
    # Each round's rows are run in short blocks, one of each row in turn, so the machine's
    # drift within a round (other work on shared cores) weighs on every row alike.
    blocks = 2 if quick else 5
    signers = [Signer(alg) for alg in ALGORITHMS]
    runs: dict[str, list[dict[str, Any]]] = {}
    expires = int(time.time()) + 24 * 3600
    serial = iter(range(1, 1 << 62))

    def claims() -> dict[str, Any]:
        return {"iss": ISSUER, "sub": "bench-user", "exp": expires, "jti": f"t{next(serial)}"}

    def fresh_tokens(signer: Signer, count: int, path: Path) -> Path:
        """``count`` tokens none was seen before, one a line, as the header carries them."""
        lines = ("Bearer " + signer.token(claims()) for _ in range(count))
        path.write_text("\n".join(lines) + "\n")
        return path

    with tempfile.TemporaryDirectory(prefix="edge-limiter-bench-") as tmp:
        worker = Path(tmp) / "worker"
        build(worker)
        cached = {"authorization": "Bearer " + signers[0].token(claims())}
        config = identity_config(origin, signers)
        for _ in range(repeat):
            with LocalGateway(worker, {"EDGE_LIMITER": config}) as gw:
                for block in range(blocks):
                    measures: list[tuple[str, str, dict[str, str], Path | None]] = [
                        (HEADER_ROW, f"{gw.url}/header/x", {KEY: "hot"}, None),
                        (CACHED_ROW, f"{gw.url}/claim/x", cached, None),
                    ]
                    for signer in signers:
                        path = Path(tmp) / f"tokens-{signer.alg}-{block}.txt"
                        fresh_tokens(signer, first // blocks + warmup, path)
                        url = f"{gw.url}/claim/x"
                        measures.append((first_row(signer.alg), url, {}, path))
                    # Each block starts with another row: none always runs first.
                    turn = block % len(measures)
                    for name, url, headers, tokens in measures[turn:] + measures[:turn]:
                        count = requests // blocks if tokens is None else first // blocks
                        lines = None if tokens is None else ("authorization", tokens)
                        runs.setdefault(name, []).append(
                            rt.load(
                                url,
                                requests=count,
                                warmup=warmup,
                                headers=headers,
                                header_lines=lines,
                            )
                        )
    rows = {
        name: {
            "p50": rt.median(samples, "p50"),
            "p99": rt.median(samples, "p99"),
            "statuses": sorted({status for run in samples for status in run["statuses"]}),
        }
        for name, samples in runs.items()
    }
    report.section(
        "identity",
        {
            "requests": requests,
            "first": first,
            "repeat": repeat,
            "blocks": blocks,
            "rows": rows,
        },
    )
