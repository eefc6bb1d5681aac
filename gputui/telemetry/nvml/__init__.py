"""NVIDIA GPUs, through NVML (the ``nvidia-ml-py`` bindings, imported as ``pynvml``).

:class:`NvmlSampler` reads every GPU and never raises for anything the driver does; the
functions beside it say what an NVML error or a call that hangs means.
"""

from gputui.telemetry.nvml.sampler import (
    WEDGED,
    NvmlSampler,
    calls_in_flight,
    describe_hung_call,
    describe_nvml_error,
    end_nvml_calls,
    format_cuda_version,
    is_stale,
)

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
