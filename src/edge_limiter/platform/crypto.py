"""Signatures checked with the runtime's WebCrypto (``crypto.subtle``).

Each key is imported once per isolate and algorithm (bounded: the least recently used is
dropped past :data:`MAX_IMPORTED`), then every token it signed costs one ``verify``. A
JWS signature of an ECDSA algorithm is the raw ``r || s`` that WebCrypto takes as it is.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from js import Object
from pyodide.ffi import JsException, to_js

from ..core.identity.keys import Jwk
from .convert import globals_

MAX_IMPORTED = 256

#: Per algorithm: how a key is imported, and the parameters of ``verify``.
_PARAMS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "RS256": (
        {"name": "RSASSA-PKCS1-v1_5", "hash": "SHA-256"},
        {"name": "RSASSA-PKCS1-v1_5"},
    ),
    "PS256": ({"name": "RSA-PSS", "hash": "SHA-256"}, {"name": "RSA-PSS", "saltLength": 32}),
    "ES256": ({"name": "ECDSA", "namedCurve": "P-256"}, {"name": "ECDSA", "hash": "SHA-256"}),
    "ES384": ({"name": "ECDSA", "namedCurve": "P-384"}, {"name": "ECDSA", "hash": "SHA-384"}),
    "EdDSA": ({"name": "Ed25519"}, {"name": "Ed25519"}),
    "HS256": ({"name": "HMAC", "hash": "SHA-256"}, {"name": "HMAC"}),
}


def _js(value: dict[str, Any]) -> Any:
    return to_js(value, dict_converter=Object.fromEntries)


class WebCryptoVerifier:
    """The gateway's ``SignatureVerifier`` port over ``crypto.subtle``."""

    def __init__(self) -> None:
        self._imported: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._verify_params = {alg: _js(params) for alg, (_, params) in _PARAMS.items()}

    async def verify(self, alg: str, key: Jwk, data: bytes, signature: bytes) -> bool:
        """Whether ``signature`` over ``data`` is ``key``'s for ``alg``; False when the key
        cannot be imported for it (the runtime refuses it)."""
        subtle = globals_.crypto.subtle
        name = (key.thumbprint, alg)
        imported = self._imported.get(name)
        try:
            if imported is None:
                imported = await subtle.importKey(
                    "jwk", _js(dict(key.jwk)), _js(_PARAMS[alg][0]), False, to_js(["verify"])
                )
                self._imported[name] = imported
                while len(self._imported) > MAX_IMPORTED:
                    self._imported.popitem(last=False)
            else:
                self._imported.move_to_end(name)
            ok = await subtle.verify(
                self._verify_params[alg], imported, to_js(signature), to_js(data)
            )
        except JsException:
            return False
        return bool(ok)
