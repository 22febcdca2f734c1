"""``python -m edge_limiter.tools COMMAND``: the ``edge-limiter`` command without its script."""

from __future__ import annotations

import sys

from edge_limiter.tools.cli import main

sys.exit(main())
