"""The doctor: why PyTorch can or cannot use the GPUs here, how to fix it, and how fast
each device really is.

Headless: no Textual, and no torch in this process (torch is asked in a child,
``gputui.engine.probe``). The layers:

- :mod:`~gputui.doctor.checks`: the typed report (``Check``, ``DeviceReport``, ``DoctorReport``).
- :mod:`~gputui.doctor.run`: :func:`run_doctor` gathers this machine's facts.
- :mod:`~gputui.doctor.diagnose`: pure rules from facts to checks.
- :mod:`~gputui.doctor.render`: text and JSON.

For the app's Doctor screen: call :func:`run_doctor` in a thread worker (it blocks for
a few seconds, bounded by ``timeout_s`` plus an allowance per GPU) and render ``report.checks`` and
``report.devices``.
"""
