"""A small HTTP/1.1 relay on a real loopback port between the client and the daemon, for tests of
what the client does when a connection breaks (the Python twin of test/support/http-relay.ts).

It forwards every request untouched and records it. A planned fault loses one answer: the daemon
processes the request completely, the relay reads the whole answer, then closes the client's socket
instead of relaying it, as a network that fails on the way back would.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import httpx

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "content-length", "host"}


@dataclass
class RelayedRequest:
    method: str
    path: str
    idempotency_key: Optional[str]
    body: Any = None
    outcome: str = "relayed"  # or "answer-dropped"
    status: Optional[int] = None
    answer: Any = None


@dataclass
class _DropPlan:
    method: str
    path: re.Pattern[str]
    remaining: int


@dataclass
class HttpRelay:
    target: str
    requests: list[RelayedRequest] = field(default_factory=list)
    url: str = ""
    _plans: list[_DropPlan] = field(default_factory=list)
    _server: Optional[asyncio.AbstractServer] = None
    _upstream: Optional[httpx.AsyncClient] = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def drop_answer(self, method: str, path: str, times: int = 1) -> None:
        """Loses the answers of the next ``times`` requests matching ``method`` and the ``path`` regex."""
        self._plans.append(_DropPlan(method, re.compile(path), times))

    def requests_to(self, method: str, path: str) -> list[RelayedRequest]:
        pattern = re.compile(path)
        return [r for r in self.requests if r.method == method and pattern.fullmatch(r.path.split("?")[0])]

    async def start(self) -> "HttpRelay":
        # A fresh connection per forwarded request: the daemon's keep-alive never hides a fault.
        self._upstream = httpx.AsyncClient(base_url=self.target, limits=httpx.Limits(max_keepalive_connections=0))
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._upstream is not None:
            await self._upstream.aclose()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers: list[tuple[str, str]] = []
                for line in lines[1:]:
                    if line:
                        name, value = line.split(":", 1)
                        headers.append((name.strip(), value.strip()))
                lowered = {name.lower(): value for name, value in headers}
                body = await reader.readexactly(int(lowered.get("content-length", "0")))
                record = RelayedRequest(method, target, lowered.get("idempotency-key"), _json(body))
                self.requests.append(record)
                plan = next(
                    (p for p in self._plans if p.remaining > 0 and p.method == method and p.path.fullmatch(target.split("?")[0])),
                    None,
                )
                if plan is not None:
                    plan.remaining -= 1
                assert self._upstream is not None
                answer = await self._upstream.request(
                    method, target, headers=[(n, v) for n, v in headers if n.lower() not in _HOP_BY_HOP], content=body
                )
                record.status = answer.status_code
                record.answer = _json(answer.content)
                if plan is not None:
                    record.outcome = "answer-dropped"
                    writer.transport.abort()
                    return
                out = [f"HTTP/1.1 {answer.status_code} {answer.reason_phrase}"]
                out += [f"{n}: {v}" for n, v in answer.headers.items() if n.lower() not in _HOP_BY_HOP]
                out += [f"content-length: {len(answer.content)}", "", ""]
                writer.write("\r\n".join(out).encode("latin-1") + answer.content)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


def _json(data: bytes) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("latin-1")
