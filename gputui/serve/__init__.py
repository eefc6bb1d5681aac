"""``gputui serve``: the readings as a Prometheus exporter (``/metrics``) and as JSON
(``/snapshot``), sampled on threads of their own so that a scrape never waits for the driver.

No Textual and no torch here. ``listen`` parses ``--listen``, ``sampling`` keeps the latest
readings, ``metrics`` turns them into Prometheus series, ``server`` serves them over HTTP and
``run`` ties them together until a signal stops it. Nothing is imported here, so that the
command line can parse ``--listen`` without loading the server.
"""
