"""The apps' widgets: the monitor's panels and dialogs, the runner pane (:mod:`.runner`) and
the Doctor screen's report (:mod:`.doctor_report`); thin wrappers around what they draw."""
