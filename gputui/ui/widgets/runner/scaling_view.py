"""The scaling view: a training session over world sizes, a bar per world size.

It reads like the training view above its body (the status line names the world size);
its body is :func:`gputui.ui.render.scaling.scaling_body`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputui.ui.widgets.runner.training_view import TrainingView
from gputui.ui.widgets.runner.view import PaneState

if TYPE_CHECKING:  # loaded once the pane is built
    from rich.console import RenderableType


class ScalingView(TrainingView):
    """A scaling session: each world size's progress, images/s, speedup and efficiency."""

    def body(self, state: PaneState, width: int) -> RenderableType:
        """The scaling table (the training view's empty body before any session)."""
        from gputui.ui.render.scaling import scaling_body

        session = state.session
        if session is None:
            return super().body(state, width)
        return scaling_body(session, width, state.cores)
