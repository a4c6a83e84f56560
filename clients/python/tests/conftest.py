"""Fixtures: one real daemon per session (Postgres + Redis, as in production), a workspace of its
own per test (registered through the API), and an admin view that reads what the daemon stored."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, Optional

import httpx
import pytest

from runguard import GuardClient

from .support.daemon import Daemon, start_daemon
from .support.relay import HttpRelay


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    started = start_daemon()
    try:
        yield started
    finally:
        started.stop()


@dataclass
class Workspace:
    """A registered workspace: its API key, and calls that read or change what the daemon stored."""

    url: str
    api_key: str
    access_token: str

    def call(self, method: str, path: str, json: Any = None, *, jwt: bool = False) -> httpx.Response:
        token = self.access_token if jwt else self.api_key
        return httpx.request(method, f"{self.url}{path}", json=json, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def ok(self, method: str, path: str, json: Any = None, *, jwt: bool = False) -> Any:
        response = self.call(method, path, json, jwt=jwt)
        assert 200 <= response.status_code < 300, f"{method} {path}: {response.status_code} {response.text}"
        return response.json() if response.content else None

    def run_detail(self, run_id: str) -> dict[str, Any]:
        return self.ok("GET", f"/v1/runs/{run_id}")  # type: ignore[no-any-return]

    def runs_of(self, user_id: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/v1/runs/?user_id={user_id}&per_page=100")["items"]  # type: ignore[no-any-return]

    def block_user(self, user_id: str) -> None:
        self.ok("PUT", f"/v1/users/{user_id}", {"blocked": True})

    def price(self, model: str, input_cost: float, output_cost: float) -> None:
        self.ok("PUT", f"/v1/model-pricing/{model}", {"input_cost_per_token": input_cost, "output_cost_per_token": output_cost})

    def kill_switch(self, active: bool) -> None:
        # A registered workspace starts on basic, where the switch is refused (403): move up first.
        self.ok("POST", "/v1/billing/plan", {"plan": "scale"}, jwt=True)
        self.ok("POST", "/v1/workspace/kill-switch", {"active": active})


@pytest.fixture
def workspace(daemon: Daemon) -> Workspace:
    email = f"py-{secrets.token_hex(6)}@example.test"
    response = httpx.post(
        f"{daemon.url}/v1/auth/register",
        json={"email": email, "password": secrets.token_urlsafe(16), "workspace_name": "pytest"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    return Workspace(daemon.url, body["api_key"], body["access_token"])


@pytest.fixture
async def client(workspace: Workspace) -> AsyncIterator[GuardClient]:
    async with GuardClient(workspace.api_key, workspace.url) as guard:
        yield guard


@pytest.fixture
async def relay(daemon: Daemon) -> AsyncIterator[HttpRelay]:
    started = await HttpRelay(daemon.url).start()
    try:
        yield started
    finally:
        await started.close()


def step_of(run: dict[str, Any], sequence: int) -> Optional[dict[str, Any]]:
    return next((step for step in run["steps"] if step["sequence"] == sequence), None)
