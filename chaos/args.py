"""Argument types shared by the chaos command lines (``haclient-broker``, ``haclient-toxiproxy``,
``haclient-chaos``): each checks one value and, when it is wrong, raises
``argparse.ArgumentTypeError`` with a message that names what is accepted, so argparse exits 2
with one line instead of a traceback later.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
from pathlib import Path

__all__ = ["LOG_LEVELS", "log_level", "non_negative_seconds", "port", "positive_seconds", "store"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def port(text: str) -> int:
    """A TCP port: an integer from 0 (any free port) to 65535."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {number}")
    return number


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds above 0."""
    value = _seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 seconds, got {text!r}")
    return value


def non_negative_seconds(text: str) -> float:
    """A finite number of seconds, 0 or more."""
    value = _seconds(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 seconds or more, got {text!r}")
    return value


def log_level(text: str) -> str:
    """A logging level name (any case), returned in upper case."""
    level = text.upper()
    if level not in LOG_LEVELS or not isinstance(logging.getLevelName(level), int):
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r} (known: {', '.join(LOG_LEVELS)})"
        )
    return level


def store(text: str) -> str:
    """A store file in a directory that exists and this process may write to."""
    directory = Path(text).parent
    if not directory.is_dir():
        raise argparse.ArgumentTypeError(f"no such directory for the store: {str(directory)!r}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"cannot write to the store's directory {str(directory)!r}"
        )
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"the store must be a file, not the directory {text!r}")
    return text
