"""One started run: records model and tool calls as guarded steps."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Mapping
from typing import Any, Callable, Coroutine, Optional
from urllib.parse import quote

from ._http import HttpTransport
from ._step_calls import StepCalls
from .errors import ConflictError, GuardBlockedError, GuardError
from .extractors import TokenUsage, is_token_count
from .types import Decision, JsonObject, StepCreated, StepUpdated

logger = logging.getLogger("runguard")

MAX_SEQUENCE = 2_147_483_647
"""The largest sequence the API takes (a Postgres integer)."""

PATCH_TOKEN_FIELDS: dict[str, str] = {
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    "cache_read_tokens": "cache_read_tokens",
    "cache_write_tokens": "cache_write_tokens",
    "reasoning_tokens": "reasoning_tokens",
}
"""Which counts of a :class:`TokenUsage` the step update sends, and under which field of the
daemon's PATCH body. Only fields the daemon's schema has are sent: it answers 422 to any other
(a test compares this table with the daemon's OpenAPI document). The daemon prices cache reads
and writes at their own prices and refuses counts that do not add up (docs/cost.md)."""


class Run(StepCalls):
    """A started run, given by ``async with client.run(...) as run``. Never built directly."""

    id: str
    """Run id (UUID) assigned by the daemon."""
    user_id: str
    """The SDK user the run belongs to."""
    metadata: Optional[JsonObject]
    """Metadata the run was started with."""
    decision: Decision
    """The guardrail decision that allowed the run."""
    tags: dict[str, str]
    """The tags the run carries, as its start answered them (``{}``: none)."""

    def __init__(
        self,
        http: HttpTransport,
        *,
        id: str,
        user_id: str,
        metadata: Optional[JsonObject],
        decision: Decision,
        tags: Optional[dict[str, str]] = None,
    ) -> None:
        self._http = http
        self.id = id
        self.user_id = user_id
        self.metadata = metadata
        self.decision = decision
        self.tags = {} if tags is None else tags
        self._next_sequence = 1
        self._ended = False

    def __repr__(self) -> str:
        return f"Run(id={self.id!r}, user_id={self.user_id!r}, ended={self._ended})"

    @property
    def ended(self) -> bool:
        """True once the run was ended; later steps are refused."""
        return self._ended

    def _step_run(self, method: str) -> Run:
        return self

    def _model_step(
        self,
        fn: Callable[[], Any],
        model: str,
        input_data: Optional[Mapping[str, Any]],
        token_extractor: Optional[Callable[[Any], Any]],
    ) -> Coroutine[Any, Any, Any]:
        if not isinstance(model, str) or model == "":
            raise ValueError("model_call needs model, the model identifier (a non-empty str).")
        if token_extractor is not None and not callable(token_extractor):
            raise TypeError("token_extractor must be a callable (see runguard.extractors) or None.")
        return self._step(
            fn, {"type": "MODEL_CALL", "model": model}, f'Model call "{model}"', input_data, token_extractor
        )

    def _tool_step(
        self, fn: Callable[[], Any], tool_name: str, input_data: Optional[Mapping[str, Any]]
    ) -> Coroutine[Any, Any, Any]:
        if not isinstance(tool_name, str) or tool_name == "":
            raise ValueError("tool_call needs tool_name (a non-empty str).")
        return self._step(fn, {"type": "TOOL_CALL", "tool_name": tool_name}, f'Tool call "{tool_name}"', input_data, None)

    def _mark_ended(self) -> None:
        self._ended = True

    def _step(
        self,
        fn: Callable[[], Any],
        params: JsonObject,
        label: str,
        input_data: Optional[Mapping[str, Any]],
        extractor: Optional[Callable[[Any], Any]],
    ) -> Coroutine[Any, Any, Any]:
        if inspect.isawaitable(fn):
            # The call already started, unguarded; it must be wrapped: lambda: client.create(...).
            if inspect.iscoroutine(fn):
                fn.close()
            raise TypeError(f"{label} needs a function to call, not an awaitable: pass lambda: <call>.")
        if not callable(fn):
            raise TypeError(f"{label} needs a function to call (sync or async, no arguments).")
        if input_data is not None and not isinstance(input_data, Mapping):
            raise TypeError("input_data must be a dict (a JSON object) or None.")
        self._http.check_open()
        if self._ended:
            raise GuardError(f"Run {self.id} has ended; record steps inside its 'async with' block.")
        body = dict(params)
        if input_data is not None:
            body["input_data"] = dict(input_data)
        # Taken now, when the call is made and before anything is awaited, so calls passed together
        # to asyncio.gather get distinct sequences in argument order. A sequence whose creation
        # failed is never reused: the daemon may have stored it.
        sequence = self._take_sequence()
        return self._run_step(body, label, sequence, fn, extractor)

    def _take_sequence(self) -> int:
        sequence = self._next_sequence
        self._next_sequence += 1
        return sequence

    async def _run_step(
        self,
        body: JsonObject,
        label: str,
        sequence: int,
        fn: Callable[[], Any],
        extractor: Optional[Callable[[Any], Any]],
    ) -> Any:
        created, sequence = await self._create_step(body, sequence)
        decision = created.get("decision") or {"outcome": "DENY", "reason": None}
        if created.get("status") == "BLOCKED" or decision.get("outcome") == "DENY":
            raise GuardBlockedError(
                f"{label} (step {sequence}) in run {self.id}",
                decision,
                user_id=self.user_id,
                run_id=self.id,
                step_id=created.get("id"),
            )

        started = time.perf_counter()
        try:
            result = fn()
            if inspect.isawaitable(result):
                result = await result
        except (Exception, asyncio.CancelledError):
            try:
                await self._update_step(created["id"], {"status": "FAILED", "duration_ms": _elapsed_ms(started)})
            except Exception:
                # The caller's exception says more than a failed report; the daemon's idle timeout
                # closes the run if nothing else does.
                logger.warning("runguard: could not mark step %s of run %s FAILED", created["id"], self.id, exc_info=True)
            raise
        # A failed report propagates: silently dropping token counts would let spend escape the budgets.
        update: JsonObject = {"status": "COMPLETED", "duration_ms": _elapsed_ms(started)}
        update.update(_token_fields(extractor, result))
        await self._update_step(created["id"], update)
        return result

    async def _create_step(self, body: JsonObject, sequence: int) -> tuple[StepCreated, int]:
        """Creates the step with ``sequence``, or past it.

        Calls proxied into this run (``/proxy/runs/<id>/...``) take the run's next numbers on the
        daemon, unseen here: when one holds the number, the step tries again further on, the jump
        doubling each time, so a run with many proxied calls is passed in a few tries. Sequences
        order a run's steps; the gaps this leaves are allowed.
        """
        jump = 1
        while True:
            try:
                created: StepCreated = await self._http.request(
                    "POST", f"/v1/runs/{quote(self.id, safe='')}/steps", {**body, "sequence": sequence}
                )
                return created, sequence
            except ConflictError as error:
                if error.code != "DUPLICATE_SEQUENCE" or sequence + jump > MAX_SEQUENCE:
                    raise
                self._next_sequence = max(self._next_sequence, sequence + jump)
                sequence = self._take_sequence()
                jump *= 2

    async def _update_step(self, step_id: str, body: JsonObject) -> StepUpdated:
        path = f"/v1/runs/{quote(self.id, safe='')}/steps/{quote(step_id, safe='')}"
        return await self._http.request("PATCH", path, body)  # type: ignore[no-any-return]


def _elapsed_ms(started: float) -> int:
    return max(0, round((time.perf_counter() - started) * 1000))


def _token_fields(extractor: Optional[Callable[[Any], Any]], result: Any) -> JsonObject:
    """The PATCH fields for what ``extractor`` reads from ``result``.

    A faulty extractor never breaks the call: anything unusable means "no token counts", logged.
    """
    if extractor is None:
        return {}
    try:
        counts = extractor(result)
    except Exception:
        logger.warning("runguard: the token extractor raised; the step is recorded without tokens", exc_info=True)
        return {}
    if counts is None:
        return {}
    if isinstance(counts, TokenUsage):
        values: dict[str, Any] = {
            "prompt_tokens": counts.prompt_tokens,
            "completion_tokens": counts.completion_tokens,
            "cache_read_tokens": counts.cache_read_tokens,
            "cache_write_tokens": counts.cache_write_tokens,
            "reasoning_tokens": counts.reasoning_tokens,
        }
    elif isinstance(counts, (tuple, list)) and len(counts) == 2:
        values = {"prompt_tokens": counts[0], "completion_tokens": counts[1]}
    else:
        logger.warning(
            "runguard: the token extractor returned %s, not (prompt_tokens, completion_tokens); no tokens recorded",
            type(counts).__name__,
        )
        return {}
    return {
        wire: values[name] for name, wire in PATCH_TOKEN_FIELDS.items() if is_token_count(values.get(name))
    }
