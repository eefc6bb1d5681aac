"""The Doctor screen (:mod:`.screen`): ``gputui doctor``'s report inside the monitor.
Its widgets are :mod:`gputui.ui.widgets.doctor_report`'s."""
