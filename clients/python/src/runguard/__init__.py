"""runguard: guarded runs, model calls and tool calls for AI agents, against the runguard daemon.

::

    from runguard import GuardClient, GuardBlockedError, extractors
"""

from . import errors, extractors
from ._version import __version__
from .api_key import is_api_key_format
from .client import DEFAULT_BASE_URL, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, GuardClient, RunContext
from .errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ClientClosedError,
    ConflictError,
    GuardBlockedError,
    GuardConfigError,
    GuardError,
    InternalServerError,
    NoActiveRunError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    ValidationError,
)
from .extractors import TokenUsage
from .run import Run

__all__ = [
    "__version__",
    "GuardClient",
    "RunContext",
    "Run",
    "TokenUsage",
    "extractors",
    "is_api_key_format",
    "DEFAULT_BASE_URL",
    "DEFAULT_TIMEOUT",
    "DEFAULT_MAX_RETRIES",
]
# The error classes are named once, in errors.__all__; type checkers follow this form.
__all__ += errors.__all__
