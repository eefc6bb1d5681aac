"""The training engine: model, data, devices, trainer and typed events.

This is the only package that imports ``torch``, and it runs in the trainer's
child process, never in the UI process.
"""
