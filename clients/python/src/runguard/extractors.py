"""Token extractors for provider responses, typed structurally: no provider SDK is needed.

Each reads a response as the ``openai`` or ``anthropic`` Python SDK returns it (an object with
attributes, e.g. a pydantic model) or as a plain dict (the JSON body, ``response.model_dump()``),
and returns a :class:`TokenUsage`, or None when the response carries no usage (a stream, a mock, a
gateway that strips it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

__all__ = [
    "TokenUsage",
    "openai",
    "openai_chat_completions",
    "openai_responses",
    "anthropic",
    "anthropic_messages",
]


class TokenUsage(tuple):  # type: ignore[type-arg]
    """``(prompt_tokens, completion_tokens)``, with the finer counts as attributes.

    It *is* the seed's pair (``prompt, completion = usage`` works, ``usage == (12, 3)`` holds), so a
    hand-written extractor may return a plain tuple instead. The finer counts are parts of the pair,
    never added to it, and None when the response does not report them:

    - ``prompt_tokens``: every input token, cached or not (OpenAI's meaning; Anthropic's
      ``input_tokens`` plus its cache reads and writes).
    - ``completion_tokens``: every output token, reasoning included.
    - ``cache_read_tokens``: of the prompt, read from the provider's prompt cache.
    - ``cache_write_tokens``: of the prompt, written to the prompt cache.
    - ``reasoning_tokens``: of the completion, spent on hidden reasoning (OpenAI's reasoning, Anthropic's thinking).
    """

    cache_read_tokens: Optional[int]
    cache_write_tokens: Optional[int]
    reasoning_tokens: Optional[int]

    def __new__(
        cls,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        cache_read_tokens: Optional[int] = None,
        cache_write_tokens: Optional[int] = None,
        reasoning_tokens: Optional[int] = None,
    ) -> "TokenUsage":
        usage = super().__new__(cls, (prompt_tokens, completion_tokens))
        usage.cache_read_tokens = cache_read_tokens
        usage.cache_write_tokens = cache_write_tokens
        usage.reasoning_tokens = reasoning_tokens
        return usage

    @property
    def prompt_tokens(self) -> int:
        return self[0]  # type: ignore[no-any-return]

    @property
    def completion_tokens(self) -> int:
        return self[1]  # type: ignore[no-any-return]

    def __getnewargs_ex__(self) -> tuple[tuple[int, int], dict[str, Optional[int]]]:
        return (self[0], self[1]), {
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    def __repr__(self) -> str:
        extras = "".join(
            f", {name}={value}" for name, value in self.__getnewargs_ex__()[1].items() if value is not None
        )
        return f"TokenUsage({self[0]}, {self[1]}{extras})"


MAX_TOKEN_COUNT = 1_000_000_000_000
"""The largest count the daemon accepts (its ``Count`` maximum); beyond it a number is not usage."""


def is_token_count(value: object) -> bool:
    """A usable count: an int from 0 to :data:`MAX_TOKEN_COUNT` (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT


def _field(container: Any, name: str) -> Any:
    """``container[name]`` for a mapping, ``container.name`` for an SDK object; None when absent."""
    if container is None:
        return None
    if isinstance(container, Mapping):
        return container.get(name)
    return getattr(container, name, None)


def _count(container: Any, name: str) -> Optional[int]:
    value = _field(container, name)
    return value if is_token_count(value) else None


def _openai_usage(response: object, *, prompt: str, completion: str) -> Optional[TokenUsage]:
    """OpenAI's two APIs name the counts apart but nest them alike: ``usage.<prompt>``,
    ``usage.<completion>``, cache reads and writes in ``<prompt>_details.cached_tokens`` and
    ``.cache_write_tokens``, reasoning in ``<completion>_details.reasoning_tokens``. The daemon
    maps them the same way (src/contract/provider-usage.ts; tests/test_provider_usage.py).
    """
    usage = _field(response, "usage")
    prompt_tokens, completion_tokens = _count(usage, prompt), _count(usage, completion)
    if prompt_tokens is None or completion_tokens is None:
        return None
    details = _field(usage, f"{prompt}_details")
    return TokenUsage(
        prompt_tokens,
        completion_tokens,
        cache_read_tokens=_count(details, "cached_tokens"),
        cache_write_tokens=_count(details, "cache_write_tokens"),
        reasoning_tokens=_count(_field(usage, f"{completion}_details"), "reasoning_tokens"),
    )


def openai_chat_completions(response: object) -> Optional[TokenUsage]:
    """OpenAI Chat Completions (``client.chat.completions.create``): ``usage.prompt_tokens`` and
    ``usage.completion_tokens``; cache reads from ``prompt_tokens_details.cached_tokens``, reasoning
    from ``completion_tokens_details.reasoning_tokens``.
    """
    return _openai_usage(response, prompt="prompt_tokens", completion="completion_tokens")


def openai_responses(response: object) -> Optional[TokenUsage]:
    """OpenAI Responses API (``client.responses.create``): ``usage.input_tokens`` and
    ``usage.output_tokens``; ``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``.
    """
    return _openai_usage(response, prompt="input_tokens", completion="output_tokens")


def anthropic_messages(response: object) -> Optional[TokenUsage]:
    """Anthropic Messages (``client.messages.create``). Anthropic counts the prompt cache's writes
    (``cache_creation_input_tokens``) and reads (``cache_read_input_tokens``) apart from
    ``input_tokens``; the prompt is their sum, as the daemon's proxy counts it, so a budget never
    under-counts a cached prompt. Completion tokens are ``output_tokens``, thinking included
    (``output_tokens_details.thinking_tokens``, the reasoning part).
    """
    usage = _field(response, "usage")
    uncached, completion = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    if uncached is None or completion is None:
        return None
    written = _count(usage, "cache_creation_input_tokens")
    read = _count(usage, "cache_read_input_tokens")
    return TokenUsage(
        uncached + (written or 0) + (read or 0),
        completion,
        cache_read_tokens=read,
        cache_write_tokens=written,
        reasoning_tokens=_count(_field(usage, "output_tokens_details"), "thinking_tokens"),
    )


openai = openai_chat_completions
"""Alias of :func:`openai_chat_completions`, the most common call."""
anthropic = anthropic_messages
"""Alias of :func:`anthropic_messages`."""
