"""Routing to origins: pools of origins (and their parser) and the per-client order.

============  ================================================================
``origins``   ``Origin``, ``Pool`` and ``HealthCheck`` (parsed by ``config.pools``)
``geo``       ``ClientLocation`` and ``order_origins`` (country, continent,
              distance, priority, name)
============  ================================================================
"""

from __future__ import annotations
