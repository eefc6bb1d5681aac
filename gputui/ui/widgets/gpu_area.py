"""The GPU area: every GPU (NVIDIA's, AMD's, Intel's), or one sentence when there is none.
One widget, ``GpuList``, draws all GPUs in the form the layout picks: eight GPUs cost one
widget's repaint a beat, with only the changed lines sent to the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Size
from textual.reactive import reactive
from textual.widgets import Static

from gputui.telemetry.readings import GpuReading, gpu_label
from gputui.ui.monitor.layout import CARD_GUTTER, CARD_HEIGHT, GpuMode
from gputui.ui.render.draw import WARM, Line
from gputui.ui.render.gpu import (
    area_title,
    gpu_card,
    gpu_one_line,
    gpu_two_lines,
    side_by_side,
    stale_tag,
)
from gputui.ui.widgets.lines import LinesWidget, set_border_title
from gputui.ui.widgets.steady import SteadyRender

WAITING = "Waiting for the NVIDIA driver (NVML) to answer…"
"""What the area says until the first NVML reading arrives."""

Histories = Sequence[tuple[Sequence[float | None], Sequence[float | None]]]
"""Utilization and memory history of each GPU, in the GPUs' order."""

_MODE_CLASSES = {mode: f"-{mode.value}" for mode in GpuMode}


class GpuList(LinesWidget):
    """Every GPU, as cards in a grid, or on two lines or one line each."""

    form: reactive[GpuMode] = reactive(GpuMode.ONE_LINE, repaint=False)
    """``cards``, ``two-line`` or ``one-line``."""
    columns: reactive[int] = reactive(1, repaint=False)
    """Columns of cards (``cards`` form only)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.gpus: Sequence[GpuReading] = ()
        self.histories: Histories = ()
        self._blocks: dict[str, list[Line]] = {}

    def show(self, gpus: Sequence[GpuReading], histories: Histories) -> None:
        """Paint new readings; only the lines that changed are repainted."""
        self.gpus = gpus
        self.histories = histories
        self.rebuild()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """As many rows as the form needs for every GPU (the area scrolls past its height)."""
        count = len(self.gpus)
        if self.form is GpuMode.CARDS:
            return -(-count // max(self.columns, 1)) * CARD_HEIGHT
        return count * (2 if self.form is GpuMode.TWO_LINE else 1)

    def watch_form(self) -> None:
        self.rebuild()

    def watch_columns(self) -> None:
        self.rebuild()

    def gpu_text(self, label: int | str) -> str:
        """The plain text drawn for a GPU (its card, or its line or two), by its label
        (:func:`gpu_label`: an NVIDIA GPU's index, ``amd0``)."""
        return "\n".join(line.plain for line in self._blocks.get(str(label), []))

    def build_lines(self, width: int) -> list[Line]:
        """The lines of the current form, in the GPUs' order."""
        pairs = list(zip(self.gpus, self.histories, strict=True))
        if self.form is GpuMode.CARDS:
            columns = max(self.columns, 1)
            card_width = (width - CARD_GUTTER * (columns - 1)) // columns
            self._blocks = {
                gpu_label(gpu): gpu_card(gpu, util, memory, card_width)
                for gpu, (util, memory) in pairs
            }
            blocks = list(self._blocks.values())
            lines: list[Line] = []
            for start in range(0, len(blocks), columns):
                lines.extend(side_by_side(blocks[start : start + columns], card_width))
            return lines
        if self.form is GpuMode.TWO_LINE:
            self._blocks = {
                gpu_label(gpu): gpu_two_lines(gpu, util, memory, width)
                for gpu, (util, memory) in pairs
            }
        else:
            self._blocks = {
                gpu_label(gpu): [gpu_one_line(gpu, util, width)] for gpu, (util, _) in pairs
            }
        return [line for block in self._blocks.values() for line in block]


class GpuArea(Vertical, SteadyRender):
    """Every GPU, or the sentence that says why there is none (and the fix)."""

    mode: reactive[GpuMode] = reactive(GpuMode.MESSAGE, repaint=False)
    """How the GPUs are drawn; ``message`` shows the sentence instead."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._title = Content("NVIDIA")
        self._stale: Content | None = None
        self._message = WAITING
        self._hang: str | None = None
        self._note: str | None = None
        self._gpus: Sequence[GpuReading] = ()
        self._histories: Histories = ()
        self._message_widget = Static(self._message, id="gpu-message", markup=False)
        self._list = GpuList(id="gpu-list")
        set_border_title(self, self._title)

    def compose(self) -> ComposeResult:
        """The sentence and the list; the mode's class (monitor.tcss) shows one of them."""
        yield self._message_widget
        yield self._list

    def on_mount(self) -> None:
        self.watch_mode(self.mode)

    @property
    def message(self) -> str:
        """The sentence shown in ``message`` mode (the hung call's, while there is one)."""
        return self._hang or self._message

    @property
    def hang(self) -> str | None:
        """The sentence naming the NVML call that has not returned, while there is one."""
        return self._hang

    @property
    def gpu_list(self) -> GpuList:
        return self._list

    def watch_mode(self, mode: GpuMode) -> None:
        """Swap the mode class (at once: each change of class restyles the area) and draw
        the GPUs in the new form."""
        classes = self.classes.difference(_MODE_CLASSES.values()) | {_MODE_CLASSES[mode]}
        if classes != self.classes:  # (an older Textual restyles even for the same classes)
            self.classes = classes
        self._show_hang()
        if mode is not GpuMode.MESSAGE:
            self._list.form = mode
            self._list.show(self._gpus, self._histories)

    def set_columns(self, columns: int) -> None:
        self._list.columns = columns

    def show_message(self, sentence: str, title: str = "NVIDIA") -> None:
        """Show one sentence instead of the GPUs (NVML unavailable, or no GPU)."""
        if sentence != self._message:
            self._message = sentence
            self._show_hang()
        self._title = Content(title)
        self._update_title()

    def set_hang(self, sentence: str | None) -> None:
        """Name the NVML call that has not returned (``None``: none has hung). With no GPU
        to show it takes the message's place; under the GPUs it is the border's subtitle."""
        if sentence != self._hang:
            self._hang = sentence
            self._show_hang()

    def set_note(self, note: str | None) -> None:
        """Say under the GPUs what torch cannot use of them (``None``: nothing to say); a
        hung call's sentence goes first."""
        if note != self._note:
            self._note = note
            self._show_hang()

    def _show_hang(self) -> None:
        self._message_widget.update(self.message)
        below = self._hang or self._note if self.mode is not GpuMode.MESSAGE else None
        self.border_subtitle = Content.styled(below, WARM) if below else None

    def show_gpus(
        self,
        gpus: Sequence[GpuReading],
        histories: Histories,
        *,
        driver: str | None,
        cuda: str | None,
    ) -> None:
        """Paint every GPU (NVIDIA's in index order, then AMD's and Intel's), with their
        histories in the same order and NVIDIA's driver and CUDA versions in the title."""
        self._title = Content(area_title(driver, cuda, gpus))
        self._update_title()
        self._gpus, self._histories = gpus, histories
        if self.mode is not GpuMode.MESSAGE:
            self._list.show(gpus, histories)

    def set_stale(self, age_s: float | None) -> None:
        """Mark the readings as stale (``age_s`` old), or fresh with ``None``."""
        stale = None if age_s is None else Content.styled(stale_tag(age_s), WARM)
        if (stale is None) != (self._stale is None) or (
            stale is not None and self._stale is not None and not stale.is_same(self._stale)
        ):
            self._stale = stale
            self.set_class(stale is not None, "-stale")
            self._update_title()

    def _update_title(self) -> None:
        title = self._title
        if self._stale is not None:
            title = Content.assemble(title, " · ", self._stale)
        set_border_title(self, title)
