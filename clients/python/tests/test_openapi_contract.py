"""The client's requests and the answers it reads, held to the daemon's OpenAPI document (served at
/openapi.json, generated from the route schemas), so the Python client and the daemon cannot drift.
The TypedDicts it reads answers as (runguard/types.py) are generated from the same schemas."""

from __future__ import annotations

import re
from typing import Any, Optional

import httpx
import pytest

from runguard import GuardBlockedError, GuardClient, extractors, types
from runguard.run import PATCH_TOKEN_FIELDS

from .conftest import Workspace
from .support.daemon import Daemon
from .support.relay import HttpRelay

# The operations the client calls, and the TypedDict it reads each 2xx answer as.
CLIENT_OPERATIONS: dict[tuple[str, str], Any] = {
    ("post", "/v1/runs"): types.RunCreated,
    ("post", "/v1/runs/{run_id}/end"): types.RunEnded,
    ("post", "/v1/runs/{run_id}/steps"): types.StepCreated,
    ("patch", "/v1/runs/{run_id}/steps/{step_id}"): types.StepUpdated,
}


@pytest.fixture(scope="module")
def openapi(daemon: Daemon) -> dict[str, Any]:
    response = httpx.get(f"{daemon.url}/openapi.json", timeout=30)
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    return document  # type: ignore[no-any-return]


def operation(openapi: dict[str, Any], method: str, path: str) -> Optional[tuple[str, dict[str, Any]]]:
    """The documented operation a concrete request path falls under (trailing slash ignored)."""
    concrete = path.split("?")[0].rstrip("/")
    for template, operations in openapi["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template.rstrip("/"))) + "$"
        if re.match(pattern, concrete) and method.lower() in operations:
            return template, operations[method.lower()]
    return None


def request_schema(op: dict[str, Any]) -> dict[str, Any]:
    return op["requestBody"]["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


def response_schema(op: dict[str, Any], status: int) -> dict[str, Any]:
    return op["responses"][str(status)]["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


def violations(value: Any, schema: dict[str, Any], where: str = "body") -> list[str]:
    """The subset of JSON Schema (OpenAPI 3.0 flavour) that @fastify/swagger emits for these routes."""
    if value is None and schema.get("nullable"):
        return []
    if "anyOf" in schema:
        if any(not violations(value, option, where) for option in schema["anyOf"]):
            return []
        return [f"{where}: {value!r} matches no alternative"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} not in {schema['enum']}")
    kind = schema.get("type")
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "null": lambda v: v is None,
    }
    if kind is not None and not checks[kind](value):
        return problems + [f"{where}: {value!r} is not {kind}"]
    if kind == "integer" or kind == "number":
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where}: {value} > {schema['maximum']}")
    if kind == "string":
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
            problems.append(f"{where}: length of {value!r} out of bounds")
        if schema.get("format") == "uuid" and not re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", value):
            problems.append(f"{where}: {value!r} is not a uuid")
    if kind == "object" or (kind is None and isinstance(value, dict)):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{where}.{name}: required, missing")
        for name, item in value.items():
            if name in properties:
                problems += violations(item, properties[name], f"{where}.{name}")
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}.{name}: not in the schema (the daemon answers 422)")
            elif isinstance(schema.get("additionalProperties"), dict):
                problems += violations(item, schema["additionalProperties"], f"{where}.{name}")
    if kind == "array":
        for index, item in enumerate(value):
            problems += violations(item, schema.get("items", {}), f"{where}[{index}]")
    return problems


async def test_when_the_client_works_then_every_request_and_answer_matches_the_openapi_document(
    openapi: dict[str, Any], relay: HttpRelay, workspace: Workspace
) -> None:
    answer = {
        "usage": {
            "prompt_tokens": 50, "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 30}, "completion_tokens_details": {"reasoning_tokens": 8},
        }
    }
    anthropic_answer = {
        "usage": {"input_tokens": 5, "output_tokens": 2, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 9}
    }

    def broken() -> None:
        raise KeyError("x")

    async with GuardClient(workspace.api_key, relay.url) as guard:
        with pytest.raises(ValueError):
            async with guard.run("contract-user", metadata={"nested": {"list": [1, 2.5, None, True]}}) as run:
                await run.model_call(lambda: answer, "gpt-4o-mini", {"messages": [{"role": "user"}]}, extractors.openai)
                await run.model_call(lambda: anthropic_answer, "claude", None, extractors.anthropic)
                await run.model_call(lambda: answer, "gpt-4o-mini", None, extractors.openai_responses)
                await run.tool_call(lambda: None, "search", {"q": "x"})
                try:
                    await run.tool_call(broken, "broken")
                except KeyError:
                    pass
                workspace.block_user("contract-user")
                try:
                    await run.tool_call(lambda: None, "denied")
                except GuardBlockedError:
                    pass
                raise ValueError("end FAILED too")
        async with guard.run("other-user") as run:
            pass

    seen: set[tuple[str, str]] = set()
    statuses: set[int] = set()
    for request in relay.requests:
        found = operation(openapi, request.method, request.path)
        assert found is not None, f"{request.method} {request.path} is not in the OpenAPI document"
        template, op = found
        seen.add((request.method.lower(), template))
        assert violations(request.body, request_schema(op)) == [], f"{request.method} {template}"
        assert request.status is not None
        statuses.add(request.status)
        assert violations(request.answer, response_schema(op, request.status), "answer") == [], f"{request.method} {template}"
    assert seen == set(CLIENT_OPERATIONS)
    assert statuses == {200, 201}
    # The PATCH bodies carried the token fields the daemon accepts, cache reads included.
    patches = [r.body for r in relay.requests if r.method == "PATCH"]
    assert {"prompt_tokens": 50, "completion_tokens": 20, "cache_read_tokens": 30}.items() <= patches[0].items()
    assert {"prompt_tokens": 21, "completion_tokens": 2, "cache_read_tokens": 9}.items() <= patches[1].items()


def test_the_token_fields_sent_are_exactly_those_the_daemon_accepts(openapi: dict[str, Any]) -> None:
    patch = request_schema(openapi["paths"]["/v1/runs/{run_id}/steps/{step_id}"]["patch"])["properties"]
    for wire in PATCH_TOKEN_FIELDS.values():
        assert wire in patch, f"the client sends {wire}, which the daemon refuses"
    # When the daemon starts to accept a count the extractors already read (cache writes, reasoning),
    # this fails until runguard.run.PATCH_TOKEN_FIELDS sends it.
    for name in ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"):
        if name in patch:
            assert PATCH_TOKEN_FIELDS.get(name) == name, f"the daemon accepts {name}; send it (PATCH_TOKEN_FIELDS)"
