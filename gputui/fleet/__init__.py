"""Many hosts at once: read the GPU readings of a fleet from its Prometheus exporters.

gputui builds no fleet database of its own. Each host already serves its readings to
Prometheus (``gputui serve``, NVIDIA's dcgm-exporter or nvitop-exporter); this package reads
them back into gputui's own :class:`~gputui.telemetry.readings.GpuReading`, either from each
host's ``/metrics`` (:mod:`gputui.fleet.scrape`) or from a Prometheus server that already
scrapes them (:mod:`gputui.fleet.prometheus`). No Textual and no torch here.
"""
