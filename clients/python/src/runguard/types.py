"""Wire shapes of the daemon's answers, as the client reads them (snake_case, like the API)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Literal, Optional, Tuple, TypedDict, TypeVar, Union

from .extractors import TokenUsage

T = TypeVar("T")

JsonObject = dict[str, Any]
"""A JSON object, as accepted for ``metadata`` and ``input_data``."""

FinalStatus = Literal["COMPLETED", "FAILED"]


class _DecisionRequired(TypedDict):
    outcome: Literal["ALLOW", "DENY"]
    reason: Optional[str]


class Decision(_DecisionRequired, total=False):
    """A guardrail decision. ``reason`` is None on ALLOW, the deny code on DENY."""

    evaluated_rules: dict[str, Literal["PASS", "DENY"]]
    detail: dict[str, Any]


class RunCreated(TypedDict):
    """Answer of ``POST /v1/runs/`` (always 201, also when denied)."""

    id: str
    user_id: str
    status: Literal["RUNNING", "BLOCKED"]
    decision: Decision


class RunEnded(TypedDict):
    """Answer of ``POST /v1/runs/{run_id}/end``."""

    id: str
    status: FinalStatus
    ended_at: str


class StepCreated(TypedDict):
    """Answer of ``POST /v1/runs/{run_id}/steps`` (always 201, also when denied)."""

    id: str
    run_id: str
    sequence: int
    status: Literal["ALLOWED", "BLOCKED"]
    decision: Decision


class StepUpdated(TypedDict):
    """Answer of ``PATCH /v1/runs/{run_id}/steps/{step_id}``."""

    id: str
    status: FinalStatus


StepFn = Union[Callable[[], Awaitable[T]], Callable[[], T]]
"""A guarded function: no arguments, sync or async."""

TokenExtractor = Callable[[T], Union[TokenUsage, Tuple[int, int], None]]
"""Reads ``(prompt_tokens, completion_tokens)`` from what a model call returned; see :mod:`runguard.extractors`."""
