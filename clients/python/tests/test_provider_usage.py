"""The Python extractors count a call as the daemon's proxy and the TypeScript SDK do: each row of
test/fixtures/provider-usage.json (the table src/contract/provider-usage.ts is tested with) read
here, from a dict and from an SDK-like object."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

import pytest

from runguard import extractors

TABLE = json.loads((Path(__file__).resolve().parents[3] / "test" / "fixtures" / "provider-usage.json").read_text())

# The formats the Python client has an extractor for (embeddings are the proxy's alone).
EXTRACTORS: dict[str, Callable[[object], Optional[extractors.TokenUsage]]] = {
    "openai-chat": extractors.openai_chat_completions,
    "openai-responses": extractors.openai_responses,
    "anthropic": extractors.anthropic_messages,
}
ROWS = [row for row in TABLE["rows"] if row["format"] in EXTRACTORS]


def as_object(value: Any) -> Any:
    """The SDKs' response objects: attributes all the way down (pydantic models)."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: as_object(v) for k, v in value.items()})
    return value


def test_the_table_has_a_row_per_format() -> None:
    assert {row["format"] for row in ROWS} == set(EXTRACTORS)


@pytest.mark.parametrize("shape", [lambda v: v, as_object], ids=["dict", "object"])
@pytest.mark.parametrize("row", ROWS, ids=[row["name"] for row in ROWS])
def test_when_a_provider_reports_usage_then_the_extractor_gives_the_shared_counts(row: dict[str, Any], shape: Any) -> None:
    usage = EXTRACTORS[row["format"]](shape({"usage": row["usage"]}))
    expected = row["expected"]
    if expected is None or expected["promptTokens"] is None or expected["completionTokens"] is None:
        assert usage is None  # no pair without both totals
        return
    assert usage is not None
    assert (
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
    ) == (
        expected["promptTokens"],
        expected["completionTokens"],
        expected["cacheReadTokens"],
        expected["cacheWriteTokens"],
        expected["reasoningTokens"],
    )
