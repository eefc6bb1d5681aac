"""The parent's handle on an experiment child: :class:`ExperimentProcess`.

Torch-free. It is :class:`gputui.training.runner.TrainerProcess` (start, events,
stop, drain, the same guarantees: the stream ends with exactly one ``Finished``
or ``Error``, the child and its DataLoader workers are killed on stop and die
with this process), pointed at the experiment child and its event types.

Only the child module, its name and the event parser differ.

Typical use, from a UI thread worker::

    process = ExperimentProcess(ExperimentConfig("batch-sweep", devices=("cuda:0",))).start()
    result = ExperimentResult("batch-sweep")
    for event in process.events():      # rows arrive as each measurement ends
        result.absorb(event)
        post(event)
"""

from __future__ import annotations

from gputui.training.experiments.child import MODULE
from gputui.training.experiments.events import parse_experiment_event
from gputui.training.experiments.spec import ExperimentConfig
from gputui.training.runner import DEFAULT_GRACE_S, TrainerProcess


class ExperimentProcess(TrainerProcess):
    """One experiment child process and the events it streams."""

    child_module = MODULE
    child_name = "experiment"
    parse = staticmethod(parse_experiment_event)

    def __init__(
        self,
        config: ExperimentConfig,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        python: str | None = None,
    ) -> None:
        """Prepare (not start) an experiment.

        Args:
            config: The experiment.
            grace_s: Seconds ``stop()`` waits after SIGTERM before SIGKILL.
            python: Interpreter for the child (default: this one).
        """
        super().__init__(None, grace_s=grace_s, python=python, child_args=[config.to_json()])
        self.experiment = config
        """The experiment this process runs."""
