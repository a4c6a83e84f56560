"""The client of the runguard daemon."""

from __future__ import annotations

import contextvars
import math
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Optional
from urllib.parse import quote, urlsplit

from ._http import HttpTransport
from ._step_calls import StepCalls
from .api_key import check_api_key
from .errors import GuardBlockedError, GuardConfigError, GuardError, NoActiveRunError
from .run import Run
from .types import FinalStatus, JsonObject, RunCreated, RunEnded

DEFAULT_BASE_URL = "http://127.0.0.1:8787"
"""Where the daemon listens unless told otherwise: loopback, as a sidecar."""
DEFAULT_TIMEOUT = 60.0
"""Seconds allowed for one HTTP attempt (headers and body)."""
DEFAULT_MAX_RETRIES = 2
"""Retries after a failed attempt (connection error, timeout, 408, 429, 5xx)."""


class GuardClient(StepCalls):
    """Client of the runguard daemon: wraps an agent's work in guarded runs and steps.

    ::

        async with GuardClient(api_key) as client:
            async with client.run("user-123", metadata={"ticket": 42}) as run:
                reply = await run.model_call(lambda: llm.chat(...), "gpt-4o-mini",
                                             token_extractor=extractors.openai)
                await run.tool_call(lambda: search(reply), "search")

    The constructor checks the options and makes no call. One client serves many concurrent runs;
    use it from one event loop.
    """

    base_url: str
    """Address of the daemon, without a trailing slash."""
    timeout: float
    """Seconds allowed for one HTTP attempt."""
    max_retries: int
    """Retries after a failed attempt."""

    def __init__(
        self,
        api_key: Optional[str],
        base_url: str = DEFAULT_BASE_URL,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        key = check_api_key(api_key)
        self.base_url = _check_base_url(base_url)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
            raise GuardConfigError(f"timeout must be a positive number of seconds, got {timeout!r}.")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise GuardConfigError(f"max_retries must be a non-negative int, got {max_retries!r}.")
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self._http = HttpTransport(api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=max_retries)
        # Per client, not per module: two clients (two workspaces) never see each other's runs.
        self._current_run: contextvars.ContextVar[Optional[Run]] = contextvars.ContextVar(
            f"runguard_run_{id(self)}", default=None
        )

    def __repr__(self) -> str:
        # Never the key: a client printed in a log must not leak it.
        return f"GuardClient(base_url={self.base_url!r})"

    async def __aenter__(self) -> "GuardClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._http.closed

    async def close(self) -> None:
        """Closes the HTTP client: requests in flight and later calls raise ``ClientClosedError``.

        Runs still open are left to the daemon's idle timeout. Calling it again does nothing.
        """
        await self._http.close()

    def run(
        self,
        user_id: str,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        tags: Optional[Mapping[str, str]] = None,
    ) -> "RunContext":
        """A run for ``user_id``, as an async context manager.

        On entry the run is started; a denial raises :class:`GuardBlockedError` and the block never
        runs. A clean exit ends the run COMPLETED; an exception ends it FAILED and propagates
        unchanged (even when ending the run fails too).

        ``tags`` (``{"project": "search"}``) are what the run is listed, reported and budgeted by:
        at most 16, a key 1 to 64 of ``a-z 0-9 _ . -``, a value 1 to 128 characters. Over a bound
        the start raises ``ValidationError`` (422) naming the tag.
        """
        if not isinstance(user_id, str) or user_id == "":
            raise ValueError("run needs user_id, a non-empty str.")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError("metadata must be a dict (a JSON object) or None.")
        if tags is not None and not (
            isinstance(tags, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())
        ):
            raise TypeError("tags must be a dict of str to str, or None.")
        return RunContext(self, user_id, None if metadata is None else dict(metadata), None if tags is None else dict(tags))

    @property
    def current_run(self) -> Optional[Run]:
        """The run whose ``async with`` block is executing (in this task or a task it started), or None."""
        return self._current_run.get()

    def _step_run(self, method: str) -> Run:
        self._http.check_open()
        run = self._current_run.get()
        if run is None:
            raise NoActiveRunError(
                f"client.{method}() was called outside 'async with client.run(...)'; call it inside the "
                "block or use the run handle."
            )
        return run

    async def _start_run(self, user_id: str, metadata: Optional[JsonObject], tags: Optional[dict[str, str]]) -> Run:
        body: JsonObject = {"user_id": user_id}
        if metadata is not None:
            body["metadata"] = metadata
        if tags is not None:
            body["tags"] = tags
        created: RunCreated = await self._http.request("POST", "/v1/runs/", body)
        decision = created.get("decision") or {"outcome": "DENY", "reason": None}
        if created.get("status") == "BLOCKED" or decision.get("outcome") == "DENY":
            raise GuardBlockedError(
                f'Run start for user "{user_id}"', decision, user_id=user_id, run_id=created.get("id")
            )
        return Run(
            self._http,
            id=created["id"],
            user_id=user_id,
            metadata=metadata,
            decision=decision,
            tags=dict(created.get("tags") or {}),
        )

    async def _end_run(self, run: Run, status: FinalStatus) -> RunEnded:
        run._mark_ended()
        ended: RunEnded = await self._http.request("POST", f"/v1/runs/{quote(run.id, safe='')}/end", {"status": status})
        return ended


class RunContext:
    """What ``client.run(...)`` returns: ``async with`` it to get the :class:`Run`. Enter it once."""

    def __init__(
        self, client: GuardClient, user_id: str, metadata: Optional[JsonObject], tags: Optional[dict[str, str]] = None
    ) -> None:
        self._client = client
        self._user_id = user_id
        self._metadata = metadata
        self._tags = tags
        self._run: Optional[Run] = None
        self._entered = False
        self._token: Optional[contextvars.Token[Optional[Run]]] = None

    async def __aenter__(self) -> Run:
        if self._entered:
            raise GuardError("A client.run(...) context can be entered once; call client.run again for a new run.")
        self._entered = True
        self._client._http.check_open()
        self._run = await self._client._start_run(self._user_id, self._metadata, self._tags)
        self._token = self._client._current_run.set(self._run)
        return self._run

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        assert self._run is not None
        if self._token is not None:
            try:
                self._client._current_run.reset(self._token)
            except ValueError:
                # Exited in another context than it was entered in; nothing to restore there.
                pass
            self._token = None
        if exc is None:
            await self._client._end_run(self._run, "COMPLETED")
            return
        try:
            await self._client._end_run(self._run, "FAILED")
        except Exception:
            # The block's exception is what the caller needs; the daemon's idle timeout ends the
            # run if this report failed. Returning None lets the original propagate unchanged.
            pass


def _check_base_url(base_url: object) -> str:
    if not isinstance(base_url, str) or base_url.strip() == "":
        raise GuardConfigError(f"base_url must be a URL string, got {base_url!r}.")
    stripped = base_url.rstrip("/")
    parts = urlsplit(stripped)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise GuardConfigError(f"base_url must be an http or https URL, got {base_url!r}.")
    return stripped
