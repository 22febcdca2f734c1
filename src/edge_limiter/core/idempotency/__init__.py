"""``Idempotency-Key`` semantics (draft-ietf-httpapi-idempotency-key-header, Stripe), pure.

- :mod:`.settings`: a route's ``idempotency`` table and its parser;
- :mod:`.keys`: the request field, and the Durable Object name of a caller's key;
- :mod:`.fingerprint`: what must match for a retry to replay;
- :mod:`.records`: the record's state machine with fencing tokens, and its storage form;
- :mod:`.protocol`: the one RPC call to the Durable Object that holds a record.
"""

from __future__ import annotations
