"""A rank's watch on its torchrun agent (:class:`gputui.jobs.interrupt.AgentWatch`)."""

from __future__ import annotations

import os

from gputui.jobs.interrupt import AgentWatch


def test_an_agent_gone_before_the_first_poll_is_seen_as_the_block_ends() -> None:
    """A run can end of its agent's death before a poll comes round (a rank whose peer
    stopped first loses its peers at once): the block's end looks once more. Here the
    "agent" is a pid that is not this process's parent, as after the kernel re-parents an
    orphan, and the poll never comes."""
    with AgentWatch(agent_pid=os.getppid() + 1, poll_s=3600) as watch:
        pass
    assert watch.gone
    with AgentWatch(poll_s=3600) as watch:  # the real parent, still there
        pass
    assert not watch.gone
