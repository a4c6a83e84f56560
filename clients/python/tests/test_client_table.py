"""The seed's client table, row by row, against the real daemon. What the client promises is checked
in what the daemon stored (GET /v1/runs/{id}), not in what the client says it sent."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from runguard import (
    DEFAULT_BASE_URL,
    AuthenticationError,
    ClientClosedError,
    GuardBlockedError,
    GuardClient,
    GuardConfigError,
    NoActiveRunError,
    ValidationError,
    extractors,
)

from .conftest import Workspace, step_of
from .support.relay import HttpRelay

KEY = "lg_abcdefghij12_" + "A" * 32


def chat_completion(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    """A chat completion as the OpenAI API returns it (``response.model_dump()`` has this shape)."""
    return {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0},
        },
    }


# --- Row 1: the constructor: api_key (format lg_<prefix>_<secret>), base_url (default local); no call


@pytest.mark.parametrize(
    "bad_key",
    [None, "", "sk-proj-123", "lg_ABCDEFGHIJ12_" + "A" * 32, "lg_short_" + "A" * 32, "lg_abcdefghij12_tooshort", KEY + "\n", 42],
)
def test_when_the_key_is_malformed_then_the_constructor_raises_without_echoing_it(bad_key: Any) -> None:
    with pytest.raises(GuardConfigError) as raised:
        GuardClient(bad_key)
    assert "lg_<prefix>_<secret>" in str(raised.value)
    if isinstance(bad_key, str) and len(bad_key) > 8:
        assert bad_key.strip() not in str(raised.value)


def test_when_options_are_bad_then_the_constructor_raises() -> None:
    for options in ({"base_url": "ftp://x"}, {"base_url": "not a url"}, {"timeout": 0}, {"max_retries": -1}, {"max_retries": 1.5}):
        with pytest.raises(GuardConfigError):
            GuardClient(KEY, **options)  # type: ignore[arg-type]


async def test_when_built_then_it_makes_no_call_and_defaults_to_the_local_daemon(relay: HttpRelay) -> None:
    default = GuardClient(KEY)
    assert default.base_url == DEFAULT_BASE_URL == "http://127.0.0.1:8787"
    assert KEY not in repr(default)
    await default.close()
    guard = GuardClient(KEY, relay.url + "/", timeout=5, max_retries=0)
    await asyncio.sleep(0.05)
    assert guard.base_url == relay.url
    assert relay.requests == []
    await guard.close()
    assert relay.requests == []


# --- Row 2: run(user_id, metadata=None): POST /v1/runs/ on entry; end COMPLETED or FAILED on exit


async def test_when_the_block_exits_cleanly_then_the_run_is_completed_with_its_metadata(client: GuardClient, workspace: Workspace) -> None:
    async with client.run("alice", metadata={"ticket": 42, "tags": ["a"]}) as run:
        assert client.current_run is run
        inside = workspace.run_detail(run.id)
        assert inside["status"] == "RUNNING"
        assert run.user_id == "alice"
        assert run.decision["outcome"] == "ALLOW" and run.decision["reason"] is None
    assert client.current_run is None
    stored = workspace.run_detail(run.id)
    assert stored["status"] == "COMPLETED"
    assert stored["ended_at"] is not None
    assert stored["metadata"] == {"ticket": 42, "tags": ["a"]}
    assert stored["user_id"] == "alice"
    assert run.ended


async def test_when_metadata_is_omitted_then_the_run_has_none(client: GuardClient, workspace: Workspace) -> None:
    async with client.run("bob") as run:
        pass
    assert workspace.run_detail(run.id)["metadata"] is None


async def test_when_tags_are_given_then_the_run_carries_them_and_the_list_filters_by_them(
    client: GuardClient, workspace: Workspace
) -> None:
    tags = {"project": "search", "team": "growth"}
    async with client.run("tagged", tags=tags) as run:
        assert run.tags == tags
    assert workspace.run_detail(run.id)["tags"] == tags
    async with client.run("tagged") as untagged:
        assert untagged.tags == {}
    assert workspace.run_detail(untagged.id)["tags"] == {}
    listed = workspace.ok("GET", "/v1/runs/?tag=project:search&tag=team:growth")["items"]
    assert [item["id"] for item in listed] == [run.id]


async def test_when_tags_are_over_their_bounds_then_the_start_raises_a_422_naming_the_tag(
    client: GuardClient, workspace: Workspace
) -> None:
    with pytest.raises(ValidationError) as raised:
        async with client.run("tagged", tags={"Project": "search"}):
            raise AssertionError("the block must not run")
    assert raised.value.status == 422
    assert [error["path"] for error in raised.value.errors or []] == ["body.tags.Project"]
    with pytest.raises(TypeError):
        client.run("tagged", tags={"project": 5})  # type: ignore[dict-item]
    assert workspace.runs_of("tagged") == []


class Boom(Exception):
    pass


async def test_when_the_block_raises_then_the_run_is_failed_and_the_same_exception_propagates(
    client: GuardClient, workspace: Workspace
) -> None:
    error = Boom("agent crashed")
    with pytest.raises(Boom) as raised:
        async with client.run("carol") as run:
            raise error
    assert raised.value is error
    assert raised.value.__context__ is None and raised.value.__cause__ is None
    assert workspace.run_detail(run.id)["status"] == "FAILED"


async def test_when_the_task_is_cancelled_inside_the_block_then_the_run_and_step_are_failed(
    client: GuardClient, workspace: Workspace
) -> None:
    started = asyncio.Event()
    holder: dict[str, str] = {}

    async def agent() -> None:
        async with client.run("henry") as run:
            holder["id"] = run.id

            async def forever() -> None:
                started.set()
                await asyncio.Event().wait()

            await run.model_call(forever, "gpt-4o-mini")

    task = asyncio.ensure_future(agent())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = workspace.run_detail(holder["id"])
    assert stored["status"] == "FAILED"
    assert [s["status"] for s in stored["steps"]] == ["FAILED"]


async def test_when_the_run_start_is_denied_then_blocked_error_and_the_block_never_runs(
    client: GuardClient, workspace: Workspace
) -> None:
    workspace.block_user("mallory")
    entered = False
    with pytest.raises(GuardBlockedError) as raised:
        async with client.run("mallory"):
            entered = True
    assert not entered
    blocked = raised.value
    assert blocked.deny_reason == "USER_BLOCKED"
    assert blocked.reason == 'Run start for user "mallory" was blocked: the user is blocked (USER_BLOCKED).'
    assert str(blocked) == blocked.reason
    assert blocked.user_id == "mallory" and blocked.step_id is None
    [stored] = workspace.runs_of("mallory")
    assert stored["status"] == "BLOCKED" and stored["id"] == blocked.run_id
    assert blocked.decision["outcome"] == "DENY"
    assert blocked.decision["evaluated_rules"] == {"kill_switch": "PASS", "user_blocked": "DENY"}
    # The decision's detail (the numbers behind a denial) is carried when the daemon sends it.
    assert blocked.detail == workspace.run_detail(stored["id"]).get("decision", {}).get("detail")


async def test_when_the_kill_switch_is_on_then_the_run_start_is_blocked(client: GuardClient, workspace: Workspace) -> None:
    workspace.kill_switch(True)
    with pytest.raises(GuardBlockedError) as raised:
        async with client.run("dave"):
            pytest.fail("the block ran")
    assert raised.value.deny_reason == "KILL_SWITCH_ACTIVE"
    assert "kill switch is on" in raised.value.reason


async def test_when_the_budget_is_spent_then_the_blocked_error_carries_the_decision(client: GuardClient, workspace: Workspace) -> None:
    workspace.ok("PATCH", "/v1/workspace", {"daily_budget_usd": 0})
    with pytest.raises(GuardBlockedError) as raised:
        async with client.run("erin"):
            pytest.fail("the block ran")
    blocked = raised.value
    assert blocked.deny_reason == "WORKSPACE_DAILY_BUDGET_EXCEEDED"
    assert "daily budget is spent" in blocked.reason
    assert blocked.detail == blocked.decision.get("detail")


# --- Row 3: model_call(fn, model, input_data, token_extractor): POST step, run fn, PATCH


async def test_when_an_async_model_call_succeeds_then_its_tokens_duration_and_cost_are_stored(
    client: GuardClient, workspace: Workspace
) -> None:
    workspace.price("gpt-4o-mini", 1.5e-7, 6e-7)
    calls = 0

    async def ask() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return chat_completion(1234, 567, cached=1000, reasoning=100)

    async with client.run("alice") as run:
        reply = await run.model_call(ask, "gpt-4o-mini", {"prompt": "Capital of France?"}, extractors.openai)
    assert calls == 1
    assert reply["choices"][0]["message"]["content"] == "Paris."
    stored = workspace.run_detail(run.id)
    step = step_of(stored, 1)
    assert step is not None
    assert step["type"] == "MODEL_CALL" and step["status"] == "COMPLETED"
    assert step["model"] == "gpt-4o-mini"
    assert step["input_data"] == {"prompt": "Capital of France?"}
    assert (step["prompt_tokens"], step["completion_tokens"]) == (1234, 567)
    assert step["cached_prompt_tokens"] == 1000
    assert isinstance(step["duration_ms"], int) and step["duration_ms"] >= 0
    assert step["cost_usd"] == pytest.approx(1234 * 1.5e-7 + 567 * 6e-7)
    assert step["decision"]["outcome"] == "ALLOW"
    assert stored["total_tokens"] == 1801


async def test_when_a_sync_model_call_returns_an_sdk_object_then_its_tokens_are_stored(
    client: GuardClient, workspace: Workspace
) -> None:
    # An Anthropic SDK Message: attributes, not keys; cache writes and reads counted apart from input.
    message = SimpleNamespace(
        id="msg_01", type="message", role="assistant", content=[SimpleNamespace(type="text", text="Paris.")],
        usage=SimpleNamespace(input_tokens=20, output_tokens=7, cache_creation_input_tokens=100, cache_read_input_tokens=300),
    )
    async with client.run("alice") as run:
        got = await run.model_call(lambda: message, "claude-sonnet-4-5", token_extractor=extractors.anthropic)
    assert got is message
    step = step_of(workspace.run_detail(run.id), 1)
    assert step is not None and step["status"] == "COMPLETED"
    assert (step["prompt_tokens"], step["completion_tokens"], step["cached_prompt_tokens"]) == (420, 7, 300)
    assert step["input_data"] is None


async def test_when_no_extractor_is_given_then_no_tokens_are_recorded(client: GuardClient, workspace: Workspace) -> None:
    async with client.run("alice") as run:
        await run.model_call(lambda: chat_completion(10, 5), "gpt-4o-mini")
    step = step_of(workspace.run_detail(run.id), 1)
    assert step is not None and step["status"] == "COMPLETED"
    assert step["prompt_tokens"] is None and step["completion_tokens"] is None and step["cost_usd"] is None


async def test_when_a_hand_written_extractor_returns_a_pair_then_it_is_stored(client: GuardClient, workspace: Workspace) -> None:
    async with client.run("alice") as run:
        await run.model_call(lambda: "text", "local-llama", token_extractor=lambda text: (11, 4))
        await run.model_call(lambda: "text", "local-llama", token_extractor=lambda text: None)
        await run.model_call(lambda: "text", "local-llama", token_extractor=lambda text: 1 / 0)
    stored = workspace.run_detail(run.id)
    assert [(s["prompt_tokens"], s["completion_tokens"], s["status"]) for s in stored["steps"]] == [
        (11, 4, "COMPLETED"), (None, None, "COMPLETED"), (None, None, "COMPLETED"),
    ]


async def test_when_fn_raises_then_the_step_is_failed_and_the_same_exception_propagates(
    client: GuardClient, workspace: Workspace
) -> None:
    error = Boom("provider down")

    async def failing() -> None:
        raise error

    with pytest.raises(Boom) as raised:
        async with client.run("alice") as run:
            await run.model_call(failing, "gpt-4o-mini", token_extractor=extractors.openai)
    assert raised.value is error
    stored = workspace.run_detail(run.id)
    assert stored["status"] == "FAILED"
    step = step_of(stored, 1)
    assert step is not None and step["status"] == "FAILED" and step["duration_ms"] is not None
    assert step["prompt_tokens"] is None


async def test_when_a_step_is_denied_then_blocked_error_before_fn_and_the_step_is_stored_blocked(
    client: GuardClient, workspace: Workspace
) -> None:
    ran = False

    def tool() -> str:
        nonlocal ran
        ran = True
        return "never"

    with pytest.raises(GuardBlockedError) as raised:
        async with client.run("frank") as run:
            await run.tool_call(lambda: "ok", "lookup")
            workspace.block_user("frank")
            await run.model_call(tool, "gpt-4o-mini", {"q": 1}, extractors.openai)
    assert not ran
    blocked = raised.value
    assert blocked.deny_reason == "USER_BLOCKED"
    assert blocked.reason == f'Model call "gpt-4o-mini" (step 2) in run {run.id} was blocked: the user is blocked (USER_BLOCKED).'
    stored = workspace.run_detail(run.id)
    assert stored["status"] == "FAILED"
    step = step_of(stored, 2)
    assert step is not None and step["status"] == "BLOCKED" and step["id"] == blocked.step_id
    assert step["decision"]["reason"] == "USER_BLOCKED"
    assert blocked.run_id == run.id
    assert blocked.detail == step["decision"].get("detail")


async def test_when_the_kill_switch_turns_on_mid_run_then_the_next_step_is_blocked(client: GuardClient, workspace: Workspace) -> None:
    ran = False

    def tool() -> None:
        nonlocal ran
        ran = True

    async with client.run("gina") as run:
        workspace.kill_switch(True)
        with pytest.raises(GuardBlockedError) as raised:
            await run.tool_call(tool, "search")
    assert not ran and raised.value.deny_reason == "KILL_SWITCH_ACTIVE"


# --- Row 4: tool_call(fn, tool_name, input_data): POST TOOL_CALL, run fn, PATCH without tokens


async def test_when_tool_calls_run_sync_and_async_then_both_are_stored_without_tokens(client: GuardClient, workspace: Workspace) -> None:
    async def search(query: str) -> list[str]:
        await asyncio.sleep(0.01)
        return [query.upper()]

    async with client.run("alice") as run:
        hits = await run.tool_call(lambda: search("paris"), "search", {"q": "paris"})
        total = await run.tool_call(lambda: sum(range(10)), "calculator")
    assert hits == ["PARIS"] and total == 45
    stored = workspace.run_detail(run.id)
    first, second = stored["steps"]
    assert (first["type"], first["tool_name"], first["input_data"], first["status"]) == ("TOOL_CALL", "search", {"q": "paris"}, "COMPLETED")
    assert (second["tool_name"], second["input_data"], second["status"]) == ("calculator", None, "COMPLETED")
    for step in (first, second):
        assert step["model"] is None and step["prompt_tokens"] is None and step["completion_tokens"] is None
        assert isinstance(step["duration_ms"], int)


async def test_when_fn_is_an_awaitable_instead_of_a_function_then_it_is_refused_and_nothing_recorded(
    client: GuardClient, workspace: Workspace
) -> None:
    async def search() -> str:
        return "x"

    async with client.run("alice") as run:
        with pytest.raises(TypeError, match="not an awaitable"):
            await run.tool_call(search(), "search")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await run.tool_call(search, "")
    assert workspace.run_detail(run.id)["steps"] == []


async def test_when_the_client_is_used_without_a_handle_then_it_records_on_the_current_run(
    client: GuardClient, workspace: Workspace
) -> None:
    async def deep_inside() -> str:
        return await client.tool_call(lambda: "found", "search")

    with pytest.raises(NoActiveRunError):
        client.tool_call(lambda: None, "search")
    async with client.run("alice") as run:
        assert await deep_inside() == "found"
    assert [s["tool_name"] for s in workspace.run_detail(run.id)["steps"]] == ["search"]


async def test_when_a_step_is_attempted_after_the_run_ended_then_it_is_refused(client: GuardClient) -> None:
    async with client.run("alice") as run:
        pass
    with pytest.raises(Exception, match="has ended"):
        await run.tool_call(lambda: None, "late")


# --- Row 5: close(), and async with GuardClient(...)


async def test_when_closed_then_calls_raise_client_closed(workspace: Workspace) -> None:
    async with GuardClient(workspace.api_key, workspace.url) as guard:
        async with guard.run("alice") as run:
            pass
    assert guard.closed
    with pytest.raises(ClientClosedError):
        async with guard.run("alice"):
            pytest.fail("the block ran")
    with pytest.raises(ClientClosedError):
        run.tool_call(lambda: None, "x")
    await guard.close()  # a second close does nothing


# --- Errors by status


async def test_when_the_key_is_unknown_then_authentication_error_with_code_and_request_id(workspace: Workspace) -> None:
    async with GuardClient("lg_zzzzzzzzzzzz_" + "Z" * 40, workspace.url) as guard:
        with pytest.raises(AuthenticationError) as raised:
            async with guard.run("alice"):
                pytest.fail("the block ran")
    assert raised.value.status == 401
    assert raised.value.code is not None and raised.value.detail
    assert raised.value.request_id
