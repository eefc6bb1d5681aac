"""The runner's choices (device, baseline, batch, epochs, dataset, pipeline, precision,
experiment) and its buttons.

The buttons run the app's actions, as the keys do, so a click and a key take one path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.widgets import Button, Label, Select

from gputui.device import CPU, Device
from gputui.jobs.config import DATASETS, EXPERIMENTS, PIPELINES, PRECISIONS, RunConfig

if TYPE_CHECKING:  # loaded once the devices are listed
    from gputui.jobs.events import DeviceOption

LISTING = "?listing"
"""The device choices' value until the devices are listed (the default device is used)."""

BATCH_SIZES = (32, 64, 128, 256, 512, 1024, 2048)
EPOCH_CHOICES = (1, 2, 3, 5, 10, 20)

SETTINGS = (
    ("batch", "batch_size"),
    ("epochs", "epochs"),
    ("dataset", "dataset"),
    ("pipeline", "pipeline"),
    ("precision", "precision"),
)
"""Each setting's choice (its id is ``runner-`` and this name) and the config field it sets."""


def _options(values: tuple[object, ...], extra: object) -> list[tuple[str, object]]:
    if isinstance(extra, int):  # a number the defaults named, among the numbers offered
        numbers = sorted({*(v for v in values if isinstance(v, int)), extra})
        chosen: list[object] = [*numbers]
    else:
        chosen = list(values)
    return [(str(value), value) for value in chosen]


def _choice(options: list[tuple[str, object]], value: object, id: str) -> Select[object]:
    """A compact drop-down that always holds one of its ``options``."""
    return Select(
        options, value=value, allow_blank=False, type_to_search=False, compact=True, id=id
    )


class RunnerControls(Vertical):
    """The device and settings choices, then start, compare, stop and the experiments."""

    DEFAULT_CSS = """
    RunnerControls {
        height: auto;
    }
    """

    busy = var(False)
    """Whether a run is in progress: then only stop is enabled; when idle, all but stop."""

    def __init__(self, defaults: RunConfig, *, id: str | None = None) -> None:
        """Choices that start at ``defaults``; the devices are offered once listed."""
        super().__init__(id=id)
        self.defaults = defaults

    def compose(self) -> ComposeResult:
        """A row per group of choices, then the buttons and the experiment to run (on a row
        of their own where the pane is narrow)."""
        defaults = self.defaults
        with Horizontal(classes="runner-row"):
            yield Label("Device ")
            yield _choice(
                [(f"{defaults.device} · listing devices…", LISTING)], LISTING, "runner-device"
            )
        with Horizontal(classes="runner-row"):
            yield Label("Compare vs ")
            yield _choice([("cpu", LISTING)], LISTING, "runner-baseline")
        rows = (
            (
                ("Batch ", "batch", BATCH_SIZES, defaults.batch_size),
                (" Epochs ", "epochs", EPOCH_CHOICES, defaults.epochs),
                (" Data ", "dataset", DATASETS, defaults.dataset),
            ),
            (
                ("Pipeline ", "pipeline", PIPELINES, defaults.pipeline),
                (" Precision ", "precision", PRECISIONS, defaults.precision),
            ),
        )
        for row in rows:
            with Horizontal(classes="runner-row"):
                for label, name, values, value in row:
                    yield Label(label)
                    yield _choice(_options(values, value), value, f"runner-{name}")
        with Horizontal(id="runner-buttons"):
            with Horizontal(classes="runner-button-group"):
                yield Button("Train r", id="runner-start", compact=True, action="app.runner_start")
                yield Button(
                    "Compare c", id="runner-compare", compact=True, action="app.runner_compare"
                )
                yield Button("Stop s", id="runner-stop", compact=True, action="app.runner_stop")
            with Horizontal(classes="runner-button-group"):
                yield _choice(
                    [(name, name) for name in EXPERIMENTS], EXPERIMENTS[0], "runner-experiment"
                )
                yield Button(
                    "Experiment x",
                    id="runner-run-experiment",
                    compact=True,
                    action="app.runner_experiment",
                )

    def on_resize(self) -> None:
        """Put the experiment on a row of its own below the buttons when one row is too
        narrow for both (``-narrow``), rather than cut it off at the pane's edge."""
        groups = self.query(".runner-button-group")
        needed = sum(group.outer_size.width for group in groups)
        self.set_class(needed > self.size.width, "-narrow")

    def watch_busy(self, busy: bool) -> None:
        """Enable the buttons that can act now."""
        for name, disabled in (
            ("#runner-start", busy),
            ("#runner-compare", busy),
            ("#runner-run-experiment", busy),
            ("#runner-stop", not busy),
        ):
            self.query_one(name, Button).disabled = disabled

    def _value(self, name: str) -> object:
        return self.query_one(f"#runner-{name}", Select).value

    @property
    def device(self) -> Device:
        """The chosen device (the default one until the devices are listed)."""
        device = self._value("device")
        return device if isinstance(device, Device) else self.defaults.device

    @property
    def baseline(self) -> Device:
        """The device to compare against (the CPU until the devices are listed)."""
        baseline = self._value("baseline")
        return baseline if isinstance(baseline, Device) else CPU

    @property
    def experiment(self) -> str:
        """The chosen experiment."""
        return str(self._value("experiment"))

    def settings(self) -> dict[str, object]:
        """The chosen batch size, epochs, dataset, pipeline and precision, by config field."""
        return {field: self._value(name) for name, field in SETTINGS}

    def offer_devices(
        self, devices: tuple[DeviceOption, ...], wanted: Device, *, accelerator_first: bool
    ) -> None:
        """Offer every candidate device, the unusable ones greyed with their reason.

        Args:
            devices: The devices listed.
            wanted: The device to choose if usable (a plain ``cuda``: ``cuda:0``); the
                baseline is the CPU if usable.
            accelerator_first: Choose the first usable accelerator when ``wanted`` is the
                CPU (nothing has run yet, and the CPU was not asked for by name: a GPU is
                what the runner is for).
        """
        from gputui.ui.render.runner import device_label

        options = [(device_label(option), option.name) for option in devices]
        usable = [option.name for option in devices if option.usable]
        for name, prefer in (("device", wanted), ("baseline", CPU)):
            select = self.query_one(f"#runner-{name}", Select)
            select.set_options(options)
            indexed = prefer.indexed()
            choice = indexed if indexed in usable else (usable[0] if usable else None)
            if name == "device" and prefer == CPU and accelerator_first:
                accelerators = [device for device in usable if device != CPU]
                choice = accelerators[0] if accelerators else choice
            if choice is not None:
                select.value = choice
