"""The monitor's widgets: thin wrappers that paint what ``gputui.ui.render`` draws."""
