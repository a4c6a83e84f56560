"""``model_call`` and ``tool_call``, declared once for :class:`Run` and :class:`GuardClient`.

A run records its steps itself; the client passes them to its current run. Both share these typed
overloads, so the two entry points cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Optional, TypeVar, overload

if TYPE_CHECKING:
    from .run import Run

T = TypeVar("T")


class StepCalls:
    """The public step methods; a subclass says which run records the step."""

    def _step_run(self, method: str) -> Run:
        """The run that records a ``method`` step; raises when there is none."""
        raise NotImplementedError

    @overload
    def model_call(
        self,
        fn: Callable[[], Awaitable[T]],
        model: str,
        input_data: Optional[Mapping[str, Any]] = None,
        token_extractor: Optional[Callable[[T], Any]] = None,
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def model_call(
        self,
        fn: Callable[[], T],
        model: str,
        input_data: Optional[Mapping[str, Any]] = None,
        token_extractor: Optional[Callable[[T], Any]] = None,
    ) -> Coroutine[Any, Any, T]: ...

    def model_call(
        self,
        fn: Callable[[], Any],
        model: str,
        input_data: Optional[Mapping[str, Any]] = None,
        token_extractor: Optional[Callable[[Any], Any]] = None,
    ) -> Coroutine[Any, Any, Any]:
        """Records a MODEL_CALL step around ``fn``: await it.

        The step is checked by the guardrails first and ``fn`` runs only when allowed; then the step
        is updated with its status, duration and, with a ``token_extractor``, the token counts.

        Raises :class:`GuardBlockedError` when a guardrail denies the step (``fn`` is not called),
        and whatever ``fn`` raises (the same exception), after the step is marked FAILED.

        On the client (``client.model_call``), for code deep inside ``client.run`` with no handle:
        the step goes to the current run, and :class:`NoActiveRunError` is raised outside
        ``async with client.run(...)``.
        """
        return self._step_run("model_call")._model_step(fn, model, input_data, token_extractor)

    @overload
    def tool_call(
        self, fn: Callable[[], Awaitable[T]], tool_name: str, input_data: Optional[Mapping[str, Any]] = None
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def tool_call(
        self, fn: Callable[[], T], tool_name: str, input_data: Optional[Mapping[str, Any]] = None
    ) -> Coroutine[Any, Any, T]: ...

    def tool_call(
        self, fn: Callable[[], Any], tool_name: str, input_data: Optional[Mapping[str, Any]] = None
    ) -> Coroutine[Any, Any, Any]:
        """Records a TOOL_CALL step around ``fn``; same flow as :meth:`model_call`, without token counts.

        On the client (``client.tool_call``): in the current run; raises :class:`NoActiveRunError`
        outside a run.
        """
        return self._step_run("tool_call")._tool_step(fn, tool_name, input_data)
