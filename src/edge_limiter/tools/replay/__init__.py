"""``edge-limiter replay``: feed the access logs of a past day through the real gateway
code with a proposed config, in simulated time, and report what it would have done.

- :mod:`.records` - one logged request, and the times logs write;
- :mod:`.formats` - a reader per log format (combined/common, Cloudflare Logpush, the
  gateway's own lines, JSON with named fields);
- :mod:`.reading` - files as one time-ordered stream (gzip, detection, malformed lines,
  the reorder window, several files merged);
- :mod:`.driver` - each request through the simulator at its time; tallies per route;
- :mod:`.report` - the terminal table and the JSON;
- :mod:`.page` - the HTML page with a chart per route (matplotlib, imported only there);
- :mod:`.command` - the command line; :mod:`.bench` - its speed and memory.
"""
