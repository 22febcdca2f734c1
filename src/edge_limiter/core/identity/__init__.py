"""Verified identity at the edge: JSON Web Tokens (RFC 7519) and their keys (RFC 7517).

The pure part: a token read strictly (:mod:`.tokens`), the checks of its header and
claims with time as an argument, the keys it may be verified with (:mod:`.keys`: JWKS,
inline JWK or PEM, a secret) and when a key set is fetched again (:mod:`.jwks`). The
signature itself is checked by the platform's WebCrypto, through the gateway's
``SignatureVerifier`` port.
"""
