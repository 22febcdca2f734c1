"""Token leases: a key's units handed to an isolate ahead of use, as pure functions.

Without leases every admitted request of a limited route costs one call to the key's
Durable Object. With a lease (opt-in per route, for the token bucket, GCRA, the fixed and
the sliding window; never the sliding log, whose entries are per request), the object
takes ``granted`` units from the limit at once (``KeyStore.decide`` with op ``"lease"``)
and the isolate admits that many requests locally until the lease ends, with no call.

The parts, each a pure function of its arguments (``now`` is always passed in, in ms):

- **Isolate side** (:mod:`.holding`, :mod:`.lease`). :class:`~.holding.RateMeter`
  measures the isolate's own rate for the key; :func:`~.holding.want` turns it into the
  units to ask for (about the rate times the ttl); :class:`~.lease.Lease` holds what was
  granted: :meth:`~.lease.Lease.take` admits locally, :meth:`~.lease.Lease.should_refresh`
  says when to ask for the next lease (before this one runs out, so requests keep being
  admitted locally while the call is in flight) and :meth:`~.lease.Lease.release` gives
  back the units that will not be used, sent with the holder's next lease request
  (``returned``). :class:`~.holding.Holding` is one isolate's leases on one key.
- **Object side** (:mod:`.grant`). :func:`~.grant.grant_size` shrinks what an isolate
  wants as the limit runs low and as more isolates hold leases, so the last units go out
  one request at a time. What a grant may take at all is each algorithm's ``grantable``
  (the lease protocol, :class:`~..algorithms.Leasable`): see the algorithm modules for
  why every use of a lease stays within the limit over any interval.
- **A busy sliding window** (its holders ask more than it allows) is instead shared out
  once per window by a plan (:mod:`.plan`): each holder's answer is its allowance for the
  rest of the window, units that accrue as the previous window slides out
  (:class:`~.lease.PlannedLease`), so a holder makes one call per window.
- **The route's side** (:mod:`.policy`): which algorithms may lease, a ttl's default and
  the reserve it keeps.

Exactness (no over-admission), in short: the object's ``check`` of the grant is the
limit's own check, every unit is used before the lease's end (the isolate's end is its
send time plus the ttl, never later than the object's, which is the grant time plus the
ttl or the end of the window the units were counted in), the bucket algorithms leave a
reserve of ``ttl`` of refill for the lag between take and use, and a refund gives back
only units that were never used and that the limit's state may take back exactly (see
``Leasable.lease_refundable``). The object keeps each holder's outstanding lease in
memory only: after a restart, returns are ignored, which can only under-admit.

Clocks: the isolate compares its own clock with the object's ``expires_at`` for the
window algorithms (a lease cannot outlive the window); both are wall clocks, so a skew
between them moves a lease's end by that skew. The bucket algorithms need no such
comparison (send time plus ttl is before the object's own end).

Headers: while an isolate admits from a lease, ``Remaining`` is the object's reported
remaining (as of the grant) plus the units left in the lease (:meth:`~.lease.Lease.remaining`).
That is an approximation: other isolates' outstanding leases are neither counted nor
subtracted, so it is off by at most the units they hold.
"""

from __future__ import annotations
