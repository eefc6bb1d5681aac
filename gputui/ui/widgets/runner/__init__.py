"""The runner pane, one widget per concern: the choices (:mod:`.controls`), the status line
and progress row (:mod:`.status`), and one view per kind of run (:mod:`.training_view`,
:mod:`.scaling_view`, :mod:`.experiment_view`; each a :class:`.view.RunView`) behind a
``ContentSwitcher``. :mod:`.pane` composes them, owns the child processes (:mod:`.setup`)
and their state, and routes their events.
"""
