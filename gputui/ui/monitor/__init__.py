"""The monitor, ``gputui``: the app (:mod:`.app`), its beat, layout, messages, palette,
process rows and styles, and leaving on a lost terminal (:mod:`.hangup`)."""
