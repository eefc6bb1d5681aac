"""The GPU topology screen (``n``): how the NVIDIA GPUs reach each other, as ``nvidia-smi topo
-m`` draws it, with its legend. Read once, when the screen opens, on the NVML sampler's own
thread (through the ``read`` the app gives): the event loop never waits for the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import ScrollableContainer
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Label, Static

from gputui.format import exception_line, for_screen, one_line
from gputui.telemetry.readings import GpuTopology
from gputui.telemetry.topology import legend_lines, topology_matrix

Reply = Callable[[object, "BaseException | None"], object]
"""Called with the topology (or ``None``: the sampler cannot say) and no error, or with the
error the read raised; on the sampler's thread."""

TopologyReader = Callable[[Reply], None]
"""Starts the read on the NVML sampler's thread; ``reply`` gets what came of it."""

READING = "Reading the GPU topology…"
"""What the bar says until the topology comes."""

TITLE = "GPU topology · as nvidia-smi topo -m"
"""What the bar says once it has."""

NVIDIA_ONLY = "The topology is read for NVIDIA GPUs only (through NVML)."
"""Said where the box has AMD or Intel GPUs, or no topology."""


class TopologyScreen(ModalScreen[None]):
    """The GPU matrix and its legend. Modal, as the Doctor, so the monitor's keys do not
    reach through it; opaque and full-size."""

    CSS_PATH = Path(__file__).with_name("topology.tcss")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("q", "app.quit", "Quit"),  # as on the monitor (a modal screen hides the app's)
    ]

    @dataclass
    class Read(Message):
        """The read came back."""

        topology: GpuTopology | None
        """The topology; ``None`` when the sampler cannot say (not NVML)."""
        error: str | None = None
        """The read raised (it should not): the exception, in one line."""

    def __init__(self, read: TopologyReader, other_gpus: int = 0) -> None:
        """Build the screen; ``read`` starts when it is first shown. ``other_gpus``: the AMD and
        Intel GPUs the monitor shows (not in the matrix)."""
        super().__init__()
        self.read = read
        self.other_gpus = other_gpus
        self.topology: GpuTopology | None = None
        self.answered = False
        """Whether the read came back (tests wait on it)."""
        self._asked = False

    def compose(self) -> ComposeResult:
        yield Label(READING, id="topology-bar", markup=False)
        with ScrollableContainer(id="topology-body"):
            yield Static("", id="topology-matrix", markup=False)
            yield Label("", id="topology-note", markup=False)
            yield Label("Legend", classes="topology-heading")
            yield Static("\n".join(legend_lines()), id="topology-legend", markup=False)
        yield Footer()

    def on_screen_resume(self) -> None:
        """Start the read once the screen is the current one: a reply handled before that
        had its matrix laid out at the empty size it was mounted with, and left so (Textual
        lays out only the current screen; seen under load)."""
        if not self._asked:
            self._asked = True
            self.read(self._replied)

    def _replied(self, value: object, error: BaseException | None) -> None:
        """On the sampler's thread: post what came back (posting is thread-safe)."""
        if error is not None:
            self.post_message(self.Read(None, one_line(exception_line(error))))
        else:  # sentences made printable before they reach the screen
            topology = value if isinstance(value, GpuTopology) else None
            self.post_message(self.Read(None if topology is None else for_screen(topology)))

    def on_topology_screen_read(self, message: Read) -> None:
        """Show the matrix, or why there is none."""
        self.answered = True
        topology = self.topology = message.topology
        matrix = self.query_one("#topology-matrix", Static)
        notes = []
        if message.error is not None:
            matrix.update(f"The topology could not be read: {message.error}")
        elif topology is None or topology.error is not None:
            matrix.update(topology.error or "" if topology is not None else "")
            notes.append(NVIDIA_ONLY)
        else:
            matrix.update("\n".join(topology_matrix(topology)))
        if self.other_gpus and NVIDIA_ONLY not in notes:
            notes.append(f"{NVIDIA_ONLY} AMD and Intel GPUs are not shown.")
        self.query_one("#topology-note", Label).update(" ".join(notes))
        self.query_one("#topology-bar", Label).update(TITLE)

    def action_close(self) -> None:
        self.dismiss()
