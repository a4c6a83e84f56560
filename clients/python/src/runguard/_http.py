"""JSON over httpx with timeouts, retries and idempotency keys. Knows nothing about runs or steps."""

from __future__ import annotations

import asyncio
import json
import platform
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

import httpx

from ._retry import is_retryable_status, retry_delay
from ._version import __version__
from .errors import APIConnectionError, APIError, APITimeoutError, ClientClosedError, GuardError

USER_AGENT = f"runguard-client-python/{__version__} (python {platform.python_version()})"


@dataclass(frozen=True)
class _Answered:
    data: Any


@dataclass(frozen=True)
class _Failed:
    error: GuardError
    retryable: bool
    headers: Optional[Mapping[str, str]] = None


class HttpTransport:
    """Sends one logical API call, retrying connection errors, timeouts, 408, 429 and 5xx."""

    def __init__(self, *, api_key: str, base_url: str, timeout: float, max_retries: int) -> None:
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries
        # Pool size above any sensible number of concurrent steps; keep-alive to the sidecar saves
        # a handshake per call.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        )
        self._closed = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def check_open(self) -> None:
        if self.closed:
            raise ClientClosedError()

    async def close(self) -> None:
        """Interrupts requests in flight and pending retry pauses; refuses new requests."""
        if self.closed:
            return
        self._closed.set()
        # Let every waiter see the event before the pool goes away under it.
        await asyncio.sleep(0)
        await self._client.aclose()

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        """Resolves with the parsed JSON of a 2xx answer, or raises the last attempt's error."""
        self.check_open()
        # One key per logical call, reused by every retry: a write whose answer was lost on the way
        # back is then replayed by the daemon instead of starting a second run or step.
        idempotency_key = None if method == "GET" else str(uuid.uuid4())
        content = None if body is None else json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        retry_index = 0
        while True:
            outcome = await self._attempt(method, path, content, idempotency_key, retry_index)
            if isinstance(outcome, _Answered):
                return outcome.data
            if not outcome.retryable or retry_index >= self._max_retries:
                raise outcome.error
            await self._pause(retry_delay(retry_index, outcome.headers))
            retry_index += 1

    async def _attempt(
        self,
        method: str,
        path: str,
        content: Optional[bytes],
        idempotency_key: Optional[str],
        retry_count: int,
    ) -> Union[_Answered, _Failed]:
        headers = {
            "Authorization": f"Bearer {self._api_key}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            "X-Runguard-Retry-Count": str(retry_count),
        }
        if content is not None:
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key

        send = asyncio.ensure_future(self._send(method, f"{self._base_url}{path}", headers, content))
        closing = asyncio.ensure_future(self._closed.wait())
        try:
            # The timeout covers headers and body: a daemon that stalls mid-body is as stuck as a
            # silent one. close() wins over both.
            await asyncio.wait({send, closing}, timeout=self._timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not send.done():
                send.cancel()
        answered = send.done() and not send.cancelled() and send.exception() is None
        if self.closed and not answered:
            raise ClientClosedError("The runguard client was closed while a request was in flight.")
        if not send.done() or send.cancelled():
            return _Failed(APITimeoutError(f"Request timed out after {self._timeout:g} s."), retryable=True)
        error = send.exception()
        if isinstance(error, httpx.TimeoutException):
            return _Failed(APITimeoutError(f"Request timed out after {self._timeout:g} s."), retryable=True)
        if isinstance(error, httpx.TransportError):
            message = f"Connection error to {self._base_url}: {type(error).__name__}: {error or 'no detail'}."
            failed = APIConnectionError(message)
            failed.__cause__ = error
            return _Failed(failed, retryable=True)
        if error is not None:
            raise error
        status, response_headers, text = send.result()

        if 200 <= status < 300:
            if text == "":
                return _Answered(None)
            try:
                return _Answered(json.loads(text))
            except ValueError as cause:
                raise GuardError(f"The daemon answered {status} with a body that is not JSON.") from cause
        api_error = APIError.from_response(status, _error_body(text), response_headers, _fallback_detail(text))
        return _Failed(api_error, retryable=is_retryable_status(status), headers=response_headers)

    async def _send(
        self, method: str, url: str, headers: Mapping[str, str], content: Optional[bytes]
    ) -> tuple[int, dict[str, str], str]:
        response = await self._client.request(method, url, headers=headers, content=content)
        return response.status_code, dict(response.headers), response.text

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._closed.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            return
        raise ClientClosedError()


def _error_body(text: str) -> Optional[dict[str, Any]]:
    """Reads ``{detail, code, errors}``, tolerating proxies that answer with HTML or plain text."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _fallback_detail(text: str) -> Optional[str]:
    trimmed = text.strip()
    # Short plain-text bodies (from a proxy in between) say more than the status; long ones are noise.
    if trimmed and len(trimmed) <= 200 and not trimmed.startswith("{"):
        return trimmed
    return None
