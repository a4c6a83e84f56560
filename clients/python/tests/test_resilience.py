"""Retries, idempotency and concurrency: through a relay that loses answers on the way back from the
real daemon, and against a scripted server for statuses the daemon cannot be made to answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runguard import (
    APIConnectionError,
    APITimeoutError,
    ClientClosedError,
    ConflictError,
    GuardClient,
    InternalServerError,
    RateLimitError,
    ValidationError,
    extractors,
)

from .conftest import Workspace
from .support.daemon import free_port
from .support.fake_server import Answer, FakeServer
from .support.relay import HttpRelay

RUN_START = r"/v1/runs/?"
STEP_CREATE = r"/v1/runs/[^/]+/steps"
STEP_UPDATE = r"/v1/runs/[^/]+/steps/[^/]+"
RUN_END = r"/v1/runs/[^/]+/end"
KEY = "lg_abcdefghij12_" + "A" * 32
RUN_ID = "5b0e4a52-8c5f-4a8e-9d57-0f7a3f6c1e01"


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


async def test_when_every_write_loses_its_answer_once_then_the_retries_record_nothing_twice(
    relay: HttpRelay, workspace: Workspace
) -> None:
    workspace.price("gpt-4o-mini", 1e-6, 2e-6)
    for method, path in (("POST", RUN_START), ("POST", STEP_CREATE), ("PATCH", STEP_UPDATE), ("POST", RUN_END)):
        relay.drop_answer(method, path)
    ran = 0

    def model() -> dict[str, Any]:
        nonlocal ran
        ran += 1
        return usage(1000, 500)

    async with GuardClient(workspace.api_key, relay.url, max_retries=2) as guard:
        async with guard.run("retry-user", metadata={"n": 1}) as run:
            await run.model_call(model, "gpt-4o-mini", token_extractor=extractors.openai)

    assert ran == 1
    for method, path in (("POST", RUN_START), ("POST", STEP_CREATE), ("PATCH", STEP_UPDATE), ("POST", RUN_END)):
        first, second = relay.requests_to(method, path)
        assert (first.outcome, second.outcome) == ("answer-dropped", "relayed")
        # The daemon did the work the first time; the retry carries the same key and is replayed.
        assert first.status in (200, 201) and second.status == first.status
        assert first.idempotency_key and first.idempotency_key == second.idempotency_key
        assert second.answer == first.answer
    keys = [r.idempotency_key for r in relay.requests]
    assert len(set(keys)) == 4, "one key per logical write"

    [stored_run] = workspace.runs_of("retry-user")
    assert stored_run["id"] == run.id and stored_run["status"] == "COMPLETED"
    detail = workspace.run_detail(run.id)
    assert len(detail["steps"]) == 1
    assert detail["steps"][0]["sequence"] == 1
    assert detail["total_tokens"] == 1500
    assert detail["total_cost_usd"] == pytest.approx(1000 * 1e-6 + 500 * 2e-6)
    today = workspace.ok("GET", "/v1/usage?days=1")
    assert today["monthly_runs"] == 1
    assert today["workspace_daily_spend_usd"] == pytest.approx(0.002)


async def test_when_answers_are_lost_more_often_than_retries_allow_then_connection_error(
    relay: HttpRelay, workspace: Workspace
) -> None:
    relay.drop_answer("POST", RUN_START, times=2)
    async with GuardClient(workspace.api_key, relay.url, max_retries=1) as guard:
        with pytest.raises(APIConnectionError):
            async with guard.run("lost-user"):
                pytest.fail("the block ran")
    assert len(relay.requests_to("POST", RUN_START)) == 2
    # The daemon started the run once; the client never learned its id.
    assert len(workspace.runs_of("lost-user")) == 1


async def test_when_twenty_calls_run_concurrently_then_sequences_follow_the_call_order(
    client: GuardClient, workspace: Workspace
) -> None:
    async def model(index: int) -> dict[str, Any]:
        # Finish in reverse order, so that the order of the answers cannot explain the sequences.
        await asyncio.sleep((20 - index) * 0.005)
        return usage(index, 1)

    async with client.run("busy-user") as run:
        results = await asyncio.gather(
            *(
                run.model_call(lambda i=i: model(i), "gpt-4o-mini", {"index": i}, extractors.openai)
                for i in range(1, 21)
            )
        )
    assert [r["usage"]["prompt_tokens"] for r in results] == list(range(1, 21))
    steps = workspace.run_detail(run.id)["steps"]
    assert len(steps) == 20
    assert [s["sequence"] for s in steps] == list(range(1, 21))
    assert [s["input_data"]["index"] for s in steps] == list(range(1, 21))
    assert [s["prompt_tokens"] for s in steps] == list(range(1, 21))
    assert {s["status"] for s in steps} == {"COMPLETED"}


async def test_when_a_proxied_call_took_the_next_sequence_then_the_step_moves_past_it(
    client: GuardClient, workspace: Workspace
) -> None:
    async with client.run("mixed-user") as run:
        # A step created by someone else on this run (the proxy does this) takes sequence 1.
        workspace.ok("POST", f"/v1/runs/{run.id}/steps", {"type": "SYSTEM", "sequence": 1})
        await run.tool_call(lambda: "ok", "search")
    steps = workspace.run_detail(run.id)["steps"]
    assert [(s["sequence"], s["type"]) for s in steps] == [(1, "SYSTEM"), (2, "TOOL_CALL")]


@pytest.fixture
async def fake() -> Any:
    servers: list[FakeServer] = []

    async def start(*script: Answer) -> FakeServer:
        server = await FakeServer(list(script)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


CREATED = {"id": RUN_ID, "user_id": "u", "status": "RUNNING", "decision": {"outcome": "ALLOW", "reason": None, "evaluated_rules": {}}}
ENDED = {"id": RUN_ID, "status": "COMPLETED", "ended_at": "2026-11-26T16:00:00.000Z"}


async def test_when_the_daemon_answers_5xx_408_and_429_then_the_same_write_is_retried_with_one_key(fake: Any) -> None:
    server = await fake(
        Answer(503, {"detail": "database down", "code": "SERVICE_UNAVAILABLE"}),
        Answer(429, {"detail": "slow down", "code": "RATE_LIMITED"}, {"retry-after-ms": "10"}),
        Answer(408, {"detail": "too slow", "code": "TIMEOUT"}),
        Answer(201, CREATED),
        Answer(200, ENDED),
    )
    async with GuardClient(KEY, server.url, max_retries=3) as guard:
        async with guard.run("u"):
            pass
    starts = [r for r in server.received if r.path == "/v1/runs/"]
    assert len(starts) == 4
    assert len({r.headers["idempotency-key"] for r in starts}) == 1
    assert [r.headers["x-runguard-retry-count"] for r in starts] == ["0", "1", "2", "3"]
    assert {r.headers["authorization"] for r in starts} == {f"Bearer {KEY}"}
    assert starts[0].body == {"user_id": "u"}
    end = server.received[-1]
    assert end.path == f"/v1/runs/{RUN_ID}/end" and end.body == {"status": "COMPLETED"}
    assert end.headers["idempotency-key"] != starts[0].headers["idempotency-key"]


async def test_when_retries_run_out_then_the_last_error_is_raised_by_its_status(fake: Any) -> None:
    server = await fake(
        Answer(500, {"detail": "boom", "code": "INTERNAL"}),
        Answer(502, {"detail": "bad gateway", "code": "BAD_GATEWAY"}, {"x-request-id": "req-7"}),
    )
    async with GuardClient(KEY, server.url, max_retries=1) as guard:
        with pytest.raises(InternalServerError) as raised:
            await guard.run("u").__aenter__()
    assert raised.value.status == 502 and raised.value.code == "BAD_GATEWAY" and raised.value.request_id == "req-7"
    assert len(server.received) == 2

    limited = await fake(Answer(429, {"detail": "slow down", "code": "RATE_LIMITED"}, {"retry-after": "0"}))
    async with GuardClient(KEY, limited.url, max_retries=0) as guard:
        with pytest.raises(RateLimitError):
            await guard.run("u").__aenter__()


async def test_when_the_daemon_answers_4xx_then_nothing_is_retried(fake: Any) -> None:
    server = await fake(
        Answer(422, {"detail": "bad", "code": "VALIDATION_FAILED", "errors": [{"path": "body.user_id", "message": "too long"}]}),
        Answer(409, {"detail": "not running", "code": "RUN_NOT_RUNNING"}),
    )
    async with GuardClient(KEY, server.url, max_retries=3) as guard:
        with pytest.raises(ValidationError) as invalid:
            await guard.run("u").__aenter__()
        assert invalid.value.errors == [{"path": "body.user_id", "message": "too long"}]
        with pytest.raises(ConflictError) as conflict:
            await guard.run("u").__aenter__()
        assert conflict.value.code == "RUN_NOT_RUNNING"
    assert len(server.received) == 2


async def test_when_the_daemon_is_unreachable_then_connection_error_after_the_retries() -> None:
    async with GuardClient(KEY, f"http://127.0.0.1:{free_port()}", max_retries=1) as guard:
        with pytest.raises(APIConnectionError, match="Connection error"):
            await guard.run("u").__aenter__()


async def test_when_an_attempt_times_out_then_it_is_retried_and_then_raised(fake: Any) -> None:
    server = await fake(Answer(0, hang=True), Answer(0, hang=True))
    async with GuardClient(KEY, server.url, timeout=0.2, max_retries=1) as guard:
        with pytest.raises(APITimeoutError):
            await guard.run("u").__aenter__()
    assert len(server.received) == 2
    assert server.received[0].headers["idempotency-key"] == server.received[1].headers["idempotency-key"]


async def test_when_closed_while_a_request_is_in_flight_then_it_raises_client_closed(fake: Any) -> None:
    server = await fake(Answer(0, hang=True))
    guard = GuardClient(KEY, server.url, timeout=30)
    entering = asyncio.ensure_future(guard.run("u").__aenter__())
    await server.arrived.wait()
    await guard.close()
    with pytest.raises(ClientClosedError):
        await entering


async def test_when_closed_during_a_retry_pause_then_it_raises_client_closed(fake: Any) -> None:
    server = await fake(Answer(503, {"detail": "down", "code": "DOWN"}, {"retry-after": "30"}))
    guard = GuardClient(KEY, server.url, max_retries=2)
    entering = asyncio.ensure_future(guard.run("u").__aenter__())
    await server.arrived.wait()
    await asyncio.sleep(0.05)
    await guard.close()
    with pytest.raises(ClientClosedError):
        await entering
    assert len(server.received) == 1
