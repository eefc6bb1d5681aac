"""The Apple MPS panel's line."""

from __future__ import annotations

from gputui.format import NA, fmt_bytes, fmt_percent
from gputui.telemetry.readings import MpsReading
from gputui.ui.render.draw import GAP, LABEL, Line, fit_line, labelled


def mps_line(mps: MpsReading | None, width: int) -> Line:
    """The MPS panel's one line."""
    if mps is None:
        return Line(("MPS", "bold"), GAP, ("checking…", LABEL)).fit(width)
    if mps.message and mps.utilization_percent is None and mps.memory_in_use_bytes is None:
        return Line(("MPS", "bold"), GAP, (mps.message, LABEL)).fit(width)
    torch_state = (
        NA
        if mps.torch_mps_available is None
        else "available"
        if mps.torch_mps_available
        else ("built, not available" if mps.torch_mps_built else "not built")
    )
    required = [
        Line(("MPS", "bold"), " ", mps.gpu_name or "Apple GPU"),
        labelled("GPU", fmt_percent(mps.utilization_percent)),
    ]
    optional = [
        labelled("in use", fmt_bytes(mps.memory_in_use_bytes)),
        labelled("PyTorch MPS", torch_state),
    ]
    return fit_line(required, optional, width).fit(width)
