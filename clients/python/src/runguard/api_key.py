"""The API key's shape, checked once at construction so a bad key fails at start-up, not mid-run."""

from __future__ import annotations

import re

from .errors import GuardConfigError

_API_KEY = re.compile(r"lg_[a-z0-9]{12}_[A-Za-z0-9_-]{32,}")
_PREFIX = re.compile(r"[a-z0-9]{12}")


def is_api_key_format(value: object) -> bool:
    """True when ``value`` is ``lg_<12 lowercase alphanumerics>_<32+ URL-safe characters>``."""
    return isinstance(value, str) and _API_KEY.fullmatch(value) is not None


def check_api_key(value: object) -> str:
    """Returns ``value`` when it is a well-formed API key, else raises :class:`GuardConfigError`.

    The message says which part is wrong but never echoes the key: it ends up in logs.
    """
    if is_api_key_format(value):
        return value  # type: ignore[return-value]
    raise GuardConfigError(f"Invalid runguard API key: {_describe_problem(value)} Expected lg_<prefix>_<secret>.")


def _describe_problem(value: object) -> str:
    if value is None or value == "":
        return "no api_key was given (is RUNGUARD_API_KEY set?)."
    if not isinstance(value, str):
        return f"api_key must be a str, got {type(value).__name__}."
    if any(ch.isspace() for ch in value):
        return "the key contains whitespace (a trailing newline from a file or env var?)."
    if not value.startswith("lg_"):
        return 'the key must start with "lg_".'
    if _PREFIX.fullmatch(value[3:15]) is None or value[15:16] != "_":
        return 'the prefix must be exactly 12 lowercase letters or digits, followed by "_".'
    return 'the secret must be at least 32 characters from A-Z, a-z, 0-9, "_" and "-".'
