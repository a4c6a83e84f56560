"""Pure parts, table-driven: the retry policy, the error hierarchy, the extractors."""

from __future__ import annotations

import pickle
from email.utils import formatdate
from types import SimpleNamespace
from typing import Any

import pytest

from runguard import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    GuardBlockedError,
    GuardError,
    InternalServerError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    TokenUsage,
    ValidationError,
    extractors,
    is_api_key_format,
)
from runguard._retry import MAX_RETRY_AFTER, backoff_delay, is_retryable_status, parse_retry_after, retry_delay


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(400, False), (401, False), (403, False), (404, False), (408, True), (409, False), (422, False), (429, True), (500, True), (503, True)],
)
def test_which_statuses_are_retried(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "x", "retry-after": "2"}, 2.0),
        ({"retry-after": "600"}, MAX_RETRY_AFTER),
        ({"retry-after": formatdate(NOW + 5, usegmt=True)}, 5.0),
        ({"retry-after": formatdate(NOW - 50, usegmt=True)}, 0.0),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "soon"}, None),
    ],
)
def test_retry_after_is_read_from_the_headers(headers: dict[str, str], seconds: Any) -> None:
    assert parse_retry_after(headers, now=NOW) == (pytest.approx(seconds) if seconds is not None else None)


def test_backoff_doubles_to_a_cap_less_up_to_a_quarter_of_jitter() -> None:
    assert [backoff_delay(i, lambda: 0.0) for i in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff_delay(0, lambda: 0.999999) == pytest.approx(0.375, abs=1e-6)
    assert retry_delay(0, {"retry-after": "2"}, lambda: 0.0) == 2.0
    assert retry_delay(1, None, lambda: 0.0) == 1.0


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequestError), (401, AuthenticationError), (403, PermissionDeniedError), (404, NotFoundError),
        (409, ConflictError), (413, PayloadTooLargeError), (422, ValidationError), (429, RateLimitError),
        (500, InternalServerError), (503, InternalServerError), (418, APIError),
    ],
)
def test_api_errors_are_classed_by_status(status: int, cls: type) -> None:
    error = APIError.from_response(status, {"detail": "why", "code": "SOME_CODE"}, {"X-Request-Id": "r1"})
    assert type(error) is cls and isinstance(error, GuardError)
    assert (error.status, error.detail, error.code, error.request_id) == (status, "why", "SOME_CODE", "r1")
    assert str(error) == f"{status} SOME_CODE: why"


def test_an_error_body_that_is_not_the_contracts_falls_back_to_the_text() -> None:
    error = APIError.from_response(502, None, {}, "Bad Gateway from nginx")
    assert (error.detail, error.code, error.errors) == ("Bad Gateway from nginx", None, None)


def test_a_deny_code_the_client_does_not_know_still_makes_a_sentence() -> None:
    blocked = GuardBlockedError("Tool call \"x\" (step 3) in run r", {"outcome": "DENY", "reason": "SOME_FUTURE_RULE", "detail": {"budget_usd": 1}},
                                user_id="u", run_id="r", step_id="s")
    assert blocked.reason == 'Tool call "x" (step 3) in run r was blocked: a guardrail denied it (SOME_FUTURE_RULE).'
    assert blocked.detail == {"budget_usd": 1}


def test_the_runaway_rules_have_their_sentences() -> None:
    blocked = GuardBlockedError("Tool call \"x\" (step 3) in run r", {"outcome": "DENY", "reason": "RUN_STEP_LIMIT_EXCEEDED", "detail": {"steps": 20, "limit": 20}},
                                user_id="u", run_id="r", step_id="s")
    assert blocked.reason == 'Tool call "x" (step 3) in run r was blocked: the run\'s step limit is reached (RUN_STEP_LIMIT_EXCEEDED).'
    assert blocked.detail == {"steps": 20, "limit": 20}


def test_api_key_format() -> None:
    assert is_api_key_format("lg_abcdefghij12_" + "a-_Z9" * 7)
    assert not is_api_key_format("lg_abcdefghij12_" + "a" * 31)
    assert not is_api_key_format("lg_abcdefghij1_" + "a" * 32)


def as_object(value: Any) -> Any:
    """The SDKs' response objects: attributes all the way down (pydantic models)."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: as_object(v) for k, v in value.items()})
    return value


OPENAI_CHAT = {"usage": {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
                         "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
                         "completion_tokens_details": {"reasoning_tokens": 16, "audio_tokens": 0}}}
OPENAI_RESPONSES = {"usage": {"input_tokens": 90, "output_tokens": 30, "total_tokens": 120,
                              "input_tokens_details": {"cached_tokens": 10},
                              "output_tokens_details": {"reasoning_tokens": 20}}}
ANTHROPIC = {"usage": {"input_tokens": 5, "output_tokens": 50, "cache_creation_input_tokens": 200,
                       "cache_read_input_tokens": 1000}}


@pytest.mark.parametrize("shape", [lambda v: v, as_object], ids=["dict", "object"])
@pytest.mark.parametrize(
    ("extractor", "response", "expected"),
    [
        (extractors.openai, OPENAI_CHAT, (100, 40, 64, None, 16)),
        (extractors.openai_responses, OPENAI_RESPONSES, (90, 30, 10, None, 20)),
        (extractors.anthropic, ANTHROPIC, (1205, 50, 1000, 200, None)),
        (extractors.openai, {"usage": {"prompt_tokens": 3, "completion_tokens": 1}}, (3, 1, None, None, None)),
        (extractors.openai, {"usage": {"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": None}}, (3, 1, None, None, None)),
        (extractors.anthropic, {"usage": {"input_tokens": 3, "output_tokens": 1, "cache_read_input_tokens": None}}, (3, 1, None, None, None)),
    ],
)
def test_extractors_read_the_documented_shapes(extractor: Any, response: Any, expected: tuple, shape: Any) -> None:
    usage = extractor(shape(response))
    assert isinstance(usage, TokenUsage)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.reasoning_tokens) == expected
    assert usage == expected[:2]


@pytest.mark.parametrize("extractor", [extractors.openai, extractors.openai_responses, extractors.anthropic])
@pytest.mark.parametrize(
    "response",
    [None, "text", {}, {"usage": None}, {"usage": {}}, {"usage": {"prompt_tokens": -1, "completion_tokens": 2,
     "input_tokens": -1, "output_tokens": 2}}, {"usage": {"prompt_tokens": True, "completion_tokens": 2,
     "input_tokens": True, "output_tokens": 2}}, {"usage": {"prompt_tokens": 1.5, "completion_tokens": 2,
     "input_tokens": 1.5, "output_tokens": 2}}],
)
def test_extractors_return_none_without_usable_usage(extractor: Any, response: Any) -> None:
    assert extractor(response) is None


def test_token_usage_is_the_seeds_pair() -> None:
    usage = TokenUsage(10, 2, cache_read_tokens=4, reasoning_tokens=1)
    prompt, completion = usage
    assert (prompt, completion) == (10, 2) and len(usage) == 2 and usage == (10, 2)
    assert repr(usage) == "TokenUsage(10, 2, cache_read_tokens=4, reasoning_tokens=1)"
    copy = pickle.loads(pickle.dumps(usage))
    assert (copy, copy.cache_read_tokens, copy.reasoning_tokens, copy.cache_write_tokens) == ((10, 2), 4, 1, None)


def test_errors_survive_pickling() -> None:
    blocked = GuardBlockedError("Run start for user \"u\"", {"outcome": "DENY", "reason": "USER_BLOCKED"}, user_id="u", run_id="r")
    api = APIError.from_response(409, {"detail": "not running", "code": "RUN_NOT_RUNNING"}, {"x-request-id": "q"})
    for error in (blocked, api):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and copy.__dict__ == error.__dict__
