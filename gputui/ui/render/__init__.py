"""Pure renderers: readings in, styled lines out, a module per panel.

Nothing here touches an app, a widget or a clock, so every function is tested on its own.
:mod:`.draw` holds the primitives (:class:`~.draw.Line`, bars, sparklines, gauges, the
theme's styles); :mod:`.cpu`, :mod:`.gpu`, :mod:`.processes` and :mod:`.mps` draw the
monitor's panels from their readings, :mod:`.runner` and :mod:`.scaling` the runner pane's
views from a session.
"""
