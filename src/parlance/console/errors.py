"""The one error of the terminal commands."""

from __future__ import annotations


class ServerError(Exception):
    """What went wrong, in one line for the terminal."""
