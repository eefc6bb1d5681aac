"""Readings from psutil, NVML and Apple's IORegistry.

No Textual and no torch here: this layer is plain Python that any front end
(the app, ``gputui snapshot``, a script) can use.
"""
