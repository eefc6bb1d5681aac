"""The monitor column: CPU panel, GPU area, process table (with its filter line, on ``/``),
the runner's brief and the MPS line, laid out to fit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Resize
from textual.geometry import Size
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from gputui.format import fmt_counted
from gputui.telemetry.history import CPU_METRIC, History, memory_metric, util_metric
from gputui.telemetry.readings import (
    CpuReading,
    DrmReading,
    GpuReading,
    MpsReading,
    NvmlReading,
    gpu_label,
)
from gputui.ui.monitor.layout import GpuMode, MonitorLayout, plan_layout
from gputui.ui.widgets.cpu_panel import CpuPanel
from gputui.ui.widgets.gpu_area import GpuArea
from gputui.ui.widgets.mps_panel import MpsPanel
from gputui.ui.widgets.process_table import ProcessTable
from gputui.ui.widgets.steady import SteadyRender

if TYPE_CHECKING:  # the filter line is built when it is first opened, not at start-up
    from textual.widgets import Input

NO_GPU = "NVML answers, but lists no NVIDIA GPU."
"""What the NVIDIA area says when the driver sees no GPU."""
UNAVAILABLE = "NVML is unavailable."
"""Fallback when NVML fails without saying why (the sampler should always say)."""
TOO_SMALL = "Terminal too small: {rows} needed. Enlarge it, or run `gputui snapshot`."
"""What the monitor says in place of its panels when they do not fit."""


class Monitor(Vertical, SteadyRender):
    """Everything the monitor shows; the app feeds it readings, it decides the layout."""

    class LaidOut(Message):
        """The monitor knows its size and has planned its panels for the first time."""

    def __init__(self, history: History, *, brief: Widget, id: str | None = None) -> None:
        """Start empty: the sparklines read ``history`` (the app records into it); the
        runner's ``brief`` goes under the process table while shown."""
        super().__init__(id=id)
        self.history = history
        self.nvml: NvmlReading | None = None
        """The latest NVIDIA reading (the runner and the Doctor read it)."""
        self.drm: DrmReading | None = None
        self.cpu: CpuReading | None = None
        self.gpus: tuple[GpuReading, ...] = ()
        """Every GPU shown: NVIDIA's (while NVML answers), then AMD's and Intel's."""
        self.cores = 0
        self.layout_plan: MonitorLayout | None = None
        self._laid_out = False
        self.cpu_panel = CpuPanel(id="cpu")
        self.gpu_area = GpuArea(id="gpus")
        self.process_table = ProcessTable(id="processes")
        self.process_filter: Input | None = None
        """The filter line under the process table (``None`` until first opened)."""
        self.mps_panel = MpsPanel(id="mps")
        self.too_small = Static(id="too-small", markup=False)
        """Says the terminal is too small, in place of the panels (hidden while they fit)."""
        self.brief = brief
        self._brief_shown = False

    def compose(self) -> ComposeResult:
        """The panels, top to bottom, and the too-small notice."""
        yield self.cpu_panel
        yield self.gpu_area
        yield self.process_table
        yield self.brief
        yield self.mps_panel
        yield self.too_small

    def on_resize(self, event: Resize) -> None:
        self.apply_layout()

    def show_cpu(self, reading: CpuReading) -> None:
        """Paint a host reading (its utilization is already recorded in the history)."""
        self.cpu = reading
        self.cpu_panel.show(reading, self.history.series(CPU_METRIC))
        if reading.logical_cores != self.cores:
            self.cores = reading.logical_cores
            self.apply_layout()

    def show_gpus(self, nvml: NvmlReading | None = None, drm: DrmReading | None = None) -> None:
        """Paint the latest NVIDIA and AMD and Intel readings (a ``None`` one keeps the last);
        their values are already recorded in the history."""
        before = self._gpu_shape()
        self.nvml = nvml or self.nvml
        self.drm = drm or self.drm
        nvml = self.nvml
        nvidia = nvml.gpus if nvml is not None and nvml.status.available else ()
        self.gpus = nvidia + (self.drm.gpus if self.drm is not None else ())
        area = self.gpu_area
        if self.gpus:
            histories = [
                (
                    self.history.series(util_metric(gpu_label(gpu))),
                    self.history.series(memory_metric(gpu_label(gpu))),
                )
                for gpu in self.gpus
            ]
            status = nvml.status if nvml is not None else None
            area.show_gpus(
                self.gpus,
                histories,
                driver=status.driver_version if status else None,
                cuda=status.cuda_driver_version if status else None,
            )
        elif nvml is not None and not nvml.status.available:
            area.show_message(nvml.status.error or UNAVAILABLE, title="NVIDIA · unavailable")
        elif nvml is not None:
            area.show_message(NO_GPU, title=area_title_no_gpu(nvml.status.driver_version))
        self._show_panels()
        host_pids = nvml is not None and nvml.status.host_pids
        self.process_table.show(self.gpus, host_pids=host_pids)
        if self._gpu_shape() != before:
            self.apply_layout()

    @property
    def gpu_less(self) -> bool:
        """NVML is unavailable and no other GPU shows: no process table, rows to spare."""
        return self.nvml is not None and not self.nvml.status.available and not self.gpus

    def show_brief(self, shown: bool) -> None:
        """Show the runner's brief under the process table, or not (the pane is on screen)."""
        if shown != self._brief_shown:
            self._brief_shown = shown
            self.apply_layout()

    @property
    def filtering(self) -> bool:
        """Whether the process filter is being typed, or is applied."""
        typing = self.process_filter is not None and self.process_filter.display
        return typing or bool(self.process_table.order.filter)

    async def open_filter(self) -> None:
        """Show the filter line, holding the filter applied now, and type into it (while
        the process table is shown)."""
        if not self.process_table.display:
            return
        field = self.process_filter
        if field is None:
            from textual.widgets import Input  # built when first opened, not at start-up

            field = self.process_filter = Input(
                placeholder="filter processes: text in any column; Enter applies, Escape clears",
                compact=True,
                id="process-filter",
            )
            await self.mount(field, after=self.process_table)
        field.value = self.process_table.order.filter
        field.display = True
        field.focus()

    def close_filter(self, text: str = "") -> None:
        """Filter the process table by ``text`` (empty: show every row), hide the filter
        line and give the table the keys (the arrows move its selection)."""
        if self.process_filter is not None:
            self.process_filter.display = False
        self.process_table.apply_filter(text)
        self.process_table.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the filter line applies it."""
        if event.input is self.process_filter:
            event.stop()
            self.close_filter(event.value.strip())

    def show_mps(self, reading: MpsReading) -> None:
        self.mps_panel.show(reading)

    def set_nvml_hang(self, sentence: str | None) -> None:
        """Name the NVML call that has not returned (``None``: none), with room for it."""
        if sentence != self.gpu_area.hang:
            self.gpu_area.set_hang(sentence)
            self.apply_layout()  # in place of a message, it may need more lines

    def set_nvml_stale(self, age_s: float | None) -> None:
        """Mark the NVIDIA area and process table stale (``age_s`` old), or fresh (``None``)."""
        self.gpu_area.set_stale(age_s)
        self.process_table.set_class(age_s is not None, "-stale")

    def apply_layout(self, size: Size | None = None) -> None:
        """Fit the panels to ``size`` (default: the monitor's own; before the first layout,
        the app's guess, so the first frame is planned); styles change with the plan only."""
        width, height = size or self.size
        if not width or not height:
            return
        gpu_count = len(self.gpus) or None
        area = self.gpu_area
        plan = plan_layout(
            width,
            height,
            cores=self.cores,
            gpu_count=gpu_count,
            message_length=len(area.message),
            brief=self._brief_shown,
        )
        if size is None and not self._laid_out:
            self._laid_out = True
            self.post_message(self.LaidOut())
        if not plan.fits:  # the rows it lacks change with the height, the plan may not
            more = fmt_counted(plan.rows_needed - height, "more row")
            self.too_small.update(TOO_SMALL.format(rows=more))
        if plan == self.layout_plan:
            return
        self.layout_plan = plan
        cpu = self.cpu_panel
        cpu.styles.height = plan.cpu_height
        cpu.grid = plan.cpu_grid
        area.styles.height = plan.gpu_height
        area.set_columns(plan.gpu_columns)
        area.mode = plan.gpu_mode if gpu_count else GpuMode.MESSAGE
        if plan.brief_height:
            self.brief.styles.height = plan.brief_height
            self.brief.set_class(plan.brief_height > 1, "-box")
        self._show_panels()

    def _show_panels(self) -> None:
        """The panels while they fit (the process table only while there are GPUs, or NVML
        answers), else the too-small notice alone: a GPU area cut off would vanish without
        a word."""
        plan = self.layout_plan
        fits = plan is None or plan.fits
        for widget, shown in (
            (self.cpu_panel, fits),
            (self.gpu_area, fits),
            (self.process_table, fits and not self.gpu_less),
            (self.brief, fits and plan is not None and plan.brief_height > 0),
            (self.mps_panel, fits),
            (self.too_small, not fits),
        ):
            if widget.display != shown:
                widget.display = shown
                if widget is self.process_table:
                    self.refresh_bindings()  # the footer offers its keys only while it shows
        if self.process_filter is not None and not self.process_table.display:
            self.process_filter.display = False  # no filter line under a hidden table

    def _gpu_shape(self) -> tuple[bool, int, str]:
        """What the layout depends on: whether NVML answers, the GPUs, NVML's error."""
        reading = self.nvml
        if reading is None:
            return (False, len(self.gpus) or -1, "")
        return (reading.status.available, len(self.gpus), reading.status.error or "")


def area_title_no_gpu(driver: str | None) -> str:
    """``NVIDIA · driver 550.54.15`` for an area with no GPU to show."""
    return "NVIDIA" + (f" · driver {driver}" if driver else "")
