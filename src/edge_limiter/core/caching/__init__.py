"""Rules of the edge cache of GET and HEAD responses kept in Workers KV, as pure functions.

- :mod:`.settings`: a route's ``cache`` table and its parser;
- :mod:`.cache_control`: the ``Cache-Control`` field, parsed;
- :mod:`.targeted`: ``CDN-Cache-Control`` and ``Cloudflare-CDN-Cache-Control`` (RFC 9213);
- :mod:`.policy`: whether to read the cache, whether and how long to store a response;
- :mod:`.keys`: KV keys, including the vary manifest and its variants;
- :mod:`.query`: canonical query strings;
- :mod:`.entry`: what is stored, and its binary framing.
"""

from __future__ import annotations
