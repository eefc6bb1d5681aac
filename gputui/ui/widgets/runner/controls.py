"""The runner's choices (device, baseline, batch, epochs, dataset, pipeline, precision,
experiment) and its buttons.

The buttons run the app's actions, as the keys do, so a click and a key take one path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.widgets import Button, Label, Select

from gputui.device import CPU, Device
from gputui.jobs.config import DATASETS, EXPERIMENTS, PIPELINES, PRECISIONS, RunConfig
from gputui.jobs.runner import Choices

if TYPE_CHECKING:  # loaded once the pane is built
    from rich.text import Text

    from gputui.jobs.events import DeviceOption

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


def _choice(options: Sequence[tuple[str | Text, object]], value: object, id: str) -> Select[object]:
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

    def __init__(
        self,
        defaults: RunConfig,
        devices: tuple[DeviceOption, ...],
        *,
        accelerator_first: bool,
        id: str | None = None,
    ) -> None:
        """Choices that start at ``defaults`` among ``devices`` (:meth:`offer_devices`)."""
        super().__init__(id=id)
        self.defaults = defaults
        self._offered = (devices, accelerator_first)

    def compose(self) -> ComposeResult:
        """A row per group of choices, then the buttons and the experiment to run (on a row
        of their own where the pane is narrow)."""
        defaults = self.defaults
        devices, accelerator_first = self._offered
        for label, name, prefer in (
            ("Device ", "device", defaults.device),
            ("Compare vs ", "baseline", CPU),
        ):
            options, choice = _device_choice(
                devices, prefer, accelerator_first and name == "device"
            )
            with Horizontal(classes="runner-row"):
                yield Label(label)
                yield _choice(options, choice, f"runner-{name}")
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

    def choices(self) -> Choices:
        """What the choices say."""
        device, baseline = self._value("device"), self._value("baseline")
        assert isinstance(device, Device) and isinstance(baseline, Device)
        settings = {field: self._value(name) for name, field in SETTINGS}
        return Choices(device, baseline, settings, str(self._value("experiment")))

    def offer_devices(self, devices: tuple[DeviceOption, ...]) -> None:
        """Offer ``devices`` instead, each choice kept where it is still usable."""
        for name in ("device", "baseline"):
            select = self.query_one(f"#runner-{name}", Select)
            chosen = select.value
            options, choice = _device_choice(devices, chosen if isinstance(chosen, Device) else CPU)
            select.set_options(options)
            select.value = choice
            # (the same value shows its new label too; Select is generic, its reactive is not)
            select.mutate_reactive(Select.value)  # type: ignore[misc]


def _device_choice(
    devices: tuple[DeviceOption, ...], prefer: Device, accelerator_first: bool = False
) -> tuple[list[tuple[Text, object]], Device]:
    """Every device as a choice, the unusable ones greyed with their reason; and the one to
    choose: ``prefer`` (a plain ``cuda``: ``cuda:0``) if usable, else the first usable one.
    ``accelerator_first``: the first usable accelerator where ``prefer`` is the CPU (nothing
    has run yet, and the CPU was not asked for by name: a GPU is what the runner is for)."""
    # the runner's renderers load with the pane's build
    from gputui.ui.render.runner import device_label

    options: list[tuple[Text, object]] = [(device_label(option), option.name) for option in devices]
    usable = [option.name for option in devices if option.usable] or [devices[0].name]
    accelerators = [device for device in usable if device != CPU]
    if accelerator_first and prefer == CPU and accelerators:
        return options, accelerators[0]
    indexed = prefer.indexed()
    return options, indexed if indexed in usable else usable[0]
