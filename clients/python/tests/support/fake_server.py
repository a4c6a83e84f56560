"""A scripted HTTP/1.1 server on loopback, for what the real daemon cannot be made to do on cue
(answer 503, 429 with Retry-After, or never answer). Each request gets the next scripted answer."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    """Never answer (the connection stays open until the server closes)."""


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeServer:
    script: list[Answer]
    received: list[Received] = field(default_factory=list)
    url: str = ""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _server: Optional[asyncio.AbstractServer] = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self) -> "FakeServer":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def close(self) -> None:
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                method, path, _ = head[0].split(" ", 2)
                headers = {n.strip().lower(): v.strip() for n, v in (line.split(":", 1) for line in head[1:] if line)}
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                self.received.append(Received(method, path, headers, json.loads(raw) if raw else None))
                self.arrived.set()
                answer = self.script.pop(0) if self.script else Answer(500, {"detail": "script exhausted", "code": "X"})
                if answer.hang:
                    await asyncio.Event().wait()
                payload = b"" if answer.body is None else json.dumps(answer.body).encode()
                lines = [f"HTTP/1.1 {answer.status} X", f"content-length: {len(payload)}", "content-type: application/json"]
                lines += [f"{n}: {v}" for n, v in answer.headers.items()]
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
