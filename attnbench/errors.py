"""Errors a user can fix: the CLI prints them on one line and exits with code 2."""


class UsageError(Exception):
    """Bad input (a flag, a config field, a file); the message names the field and value."""

    exit_code = 2


def read_user_file(path, flag: str) -> str:
    """The text of a file the user named with `flag`; every failure is a UsageError."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{flag}: file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{flag}: {path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc.strerror}") from None
