"""NVIDIA GPUs, through NVML (the ``nvidia-ml-py`` bindings, imported as ``pynvml``).

:class:`NvmlSampler` (``sampler``) reads every GPU and never raises for anything the driver
does; it asks each GPU's fields through ``queries``, its MIG devices through ``mig`` and its
processes through ``processes``. ``calls`` says what NVML's errors mean and records every
call in flight.
"""

from gputui.telemetry.nvml.calls import (
    WEDGED,
    calls_in_flight,
    describe_hung_call,
    describe_nvml_error,
    end_nvml_calls,
)
from gputui.telemetry.nvml.sampler import NvmlSampler, format_cuda_version, is_stale

__all__ = [
    "WEDGED",
    "NvmlSampler",
    "calls_in_flight",
    "describe_hung_call",
    "describe_nvml_error",
    "end_nvml_calls",
    "format_cuda_version",
    "is_stale",
]
