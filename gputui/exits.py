"""The exit codes every command and the engine's child process use."""

EXIT_OK = 0
"""Everything asked for finished."""
EXIT_FAILED = 1
"""A run, a device or a check failed (the others still ran)."""
EXIT_USAGE = 2
"""Bad input: one line on standard error says what to do."""
EXIT_INTERRUPTED = 130
"""Ctrl+C (128 + SIGINT)."""
