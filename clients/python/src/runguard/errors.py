"""Every error the client raises, rooted in :class:`GuardError` so callers can catch them in one place."""

from __future__ import annotations

from typing import Any, Mapping, Optional

# Generated from the daemon's contract (npm run clients:generate): a code a newer daemon adds still
# gets a sentence, the generic one, with its code.
from ._deny_reasons import DENY_SENTENCES

__all__ = [
    "GuardError",
    "GuardConfigError",
    "ClientClosedError",
    "NoActiveRunError",
    "GuardBlockedError",
    "APIError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "ValidationError",
    "RateLimitError",
    "InternalServerError",
    "APIConnectionError",
    "APITimeoutError",
]


class GuardError(Exception):
    """Base class of every error the client raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other constructor arguments than their message: rebuild from the state,
        # so errors cross process boundaries (multiprocessing, task queues) intact.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[GuardError], args: tuple[Any, ...], state: dict[str, Any]) -> GuardError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class GuardConfigError(GuardError, ValueError):
    """The client was misconfigured (a malformed API key, a bad option). Raised by the constructor."""


class ClientClosedError(GuardError):
    """A call was made after ``close()``, or ``close()`` interrupted a request in flight."""

    def __init__(self, message: str = "The runguard client is closed.") -> None:
        super().__init__(message)


class NoActiveRunError(GuardError):
    """``client.model_call`` or ``client.tool_call`` was called outside ``async with client.run(...)``."""


class APIError(GuardError):
    """The daemon answered with a non-2xx status. Subclasses name the status."""

    status: int
    """HTTP status of the answer."""
    detail: str
    """Human sentence from the error body (``detail``)."""
    code: Optional[str]
    """Machine code from the error body, e.g. ``RUN_NOT_RUNNING``; None when the body had none."""
    errors: Optional[list[dict[str, Any]]]
    """Field-level problems of a 422: ``[{"path": "body.user_id", "message": "..."}]``."""
    request_id: Optional[str]
    """The daemon's ``x-request-id``, to quote when reporting a problem."""
    headers: Mapping[str, str]
    """Response headers, for anything not surfaced above."""

    def __init__(
        self,
        status: int,
        body: Optional[Mapping[str, Any]],
        headers: Optional[Mapping[str, str]] = None,
        fallback_detail: Optional[str] = None,
    ) -> None:
        body = body or {}
        detail = body.get("detail")
        code = body.get("code")
        errors = body.get("errors")
        self.status = status
        self.detail = detail if isinstance(detail, str) else (fallback_detail or f"HTTP {status}")
        self.code = code if isinstance(code, str) else None
        self.errors = errors if isinstance(errors, list) else None
        self.headers = dict(headers or {})
        self.request_id = _header(self.headers, "x-request-id")
        super().__init__(f"{status} {self.code + ': ' if self.code else ''}{self.detail}")

    @staticmethod
    def from_response(
        status: int,
        body: Optional[Mapping[str, Any]],
        headers: Optional[Mapping[str, str]] = None,
        fallback_detail: Optional[str] = None,
    ) -> "APIError":
        """Builds the subclass matching ``status``, so callers can ``except NotFoundError``."""
        if status >= 500:
            cls: type[APIError] = InternalServerError
        else:
            cls = _ERROR_CLASS_BY_STATUS.get(status, APIError)
        return cls(status, body, headers, fallback_detail)


class BadRequestError(APIError):
    """400: malformed JSON or a semantically bad value."""


class AuthenticationError(APIError):
    """401: missing, invalid or revoked API key."""


class PermissionDeniedError(APIError):
    """403: plan-gated operation or wrong kind of credential."""


class NotFoundError(APIError):
    """404: unknown id (or an id of another workspace)."""


class ConflictError(APIError):
    """409: state conflict (``RUN_NOT_RUNNING``, ``STEP_ALREADY_FINISHED``, ``DUPLICATE_SEQUENCE``)."""


class PayloadTooLargeError(APIError):
    """413: request body over the daemon's limit."""


class ValidationError(APIError):
    """422: the body failed schema validation; see ``errors``."""


class RateLimitError(APIError):
    """429: too many requests (retried automatically, honouring ``Retry-After``)."""


class InternalServerError(APIError):
    """5xx: the daemon failed (retried automatically)."""


_ERROR_CLASS_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitError,
}


class APIConnectionError(GuardError):
    """The request never got an HTTP answer (refused, reset, lost on the way back). Retried automatically."""

    def __init__(self, message: str = "Connection error.") -> None:
        super().__init__(message)


class APITimeoutError(APIConnectionError):
    """One attempt took longer than the client's ``timeout``. Retried automatically."""

    def __init__(self, message: str = "Request timed out.") -> None:
        super().__init__(message)


class GuardBlockedError(GuardError):
    """A guardrail denied a run start or a step; the guarded code did not run.

    Not an HTTP error: the daemon answered 201 with status ``BLOCKED``.
    """

    reason: str
    """A readable sentence saying what was blocked and why."""
    deny_reason: Optional[str]
    """The rule's deny code, e.g. ``USER_BLOCKED``; None only if the daemon sent a denial without one."""
    detail: Optional[dict[str, Any]]
    """The decision's ``detail`` (the numbers behind a budget or limit denial) when the daemon sends one."""
    decision: dict[str, Any]
    """The whole decision as the daemon answered it (``outcome``, ``reason``, ``evaluated_rules``...)."""
    user_id: str
    """The SDK user the run belongs to."""
    run_id: Optional[str]
    """Id of the blocked run, or of the run inside which a step was blocked."""
    step_id: Optional[str]
    """Id of the stored ``BLOCKED`` step, when a step was denied."""

    def __init__(
        self,
        what: str,
        decision: Mapping[str, Any],
        *,
        user_id: str,
        run_id: Optional[str],
        step_id: Optional[str] = None,
    ) -> None:
        code = decision.get("reason")
        self.deny_reason = code if isinstance(code, str) else None
        if self.deny_reason is None:
            why = "a guardrail denied it"
        else:
            why = f"{DENY_SENTENCES.get(self.deny_reason, 'a guardrail denied it')} ({self.deny_reason})"
        self.reason = f"{what} was blocked: {why}."
        detail = decision.get("detail")
        self.detail = dict(detail) if isinstance(detail, Mapping) else None
        self.decision = dict(decision)
        self.user_id = user_id
        self.run_id = run_id
        self.step_id = step_id
        super().__init__(self.reason)


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None
