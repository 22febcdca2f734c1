"""Rate limiting, the gateway's heart, as one pure package.

- :mod:`.rates`: ``"10/second; 1000/hour"``, parsed into :class:`~.rates.Rate` and
  :class:`~.rates.Limit`;
- :mod:`.decision`: the one result type, :class:`~.decision.Decision`;
- :mod:`.algorithms`: one module per algorithm, each a pure ``check`` over plain state,
  and the lease protocol (:class:`~.algorithms.Leasable`) the leasable ones implement;
- :mod:`.rule`: several limits on one key, all or nothing;
- :mod:`.check`: a route's limits as its isolate asks about them, made once;
- :mod:`.protocol`: the rate limiter object's requests and answers, and their codec;
- :mod:`.keystore`: the object's step (memory first, SQLite behind it);
- :mod:`.carry`: a key counted under other limits keeps what it used;
- :mod:`.leases`: units handed to an isolate ahead of use (the isolate's side, the
  object's grant side, a sliding window's plan, the route's policy);
- :mod:`.denycache`: keys known to be over their limit, answered without a call;
- :mod:`.overrides`: other limits for some keys, set at run time.
"""

from __future__ import annotations
