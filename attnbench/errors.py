"""Errors a user can fix: the CLI prints them on one line and exits with code 2."""


class UsageError(Exception):
    """Bad input (a flag, a config field, a file); the message names the field and value."""

    exit_code = 2
