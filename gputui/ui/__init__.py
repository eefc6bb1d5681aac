"""The Textual apps. They see the other layers only through readings and events.

One folder per thing on screen: :mod:`.monitor` (``gputui``), :mod:`.fleet` (``gputui
--hosts``) and :mod:`.doctor` (the Doctor screen). Their widgets are in :mod:`.widgets`,
their pure renderers in :mod:`.render`; :mod:`.colours` and :mod:`.row_order` are shared.
"""
