"""The one error the dev stack raises: its message is a single line a person can act on."""

from __future__ import annotations


class DevStackError(Exception):
    """A component could not be built, started or reached; str(error) says what and how to fix it."""


class MissingTools(DevStackError):
    """Host tools are missing and this process may not install them; the commands exit 2 with this line."""
