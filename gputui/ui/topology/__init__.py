"""The GPU topology screen (``n``)."""
