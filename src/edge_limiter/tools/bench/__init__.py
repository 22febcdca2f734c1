"""The benchmarks (``edge-limiter bench``, :mod:`.run`): every figure a ratio against a peer
measured in the same run."""
