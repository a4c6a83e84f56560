import asyncio, os
from pathlib import Path

from runguard import GuardBlockedError, GuardClient, extractors

# The key `npm start` printed and saved: RUNGUARD_API_KEY, else .runguard/api-key (run from the repo).
API_KEY = os.environ.get("RUNGUARD_API_KEY") or Path(".runguard/api-key").read_text().strip()
BASE_URL = os.environ.get("RUNGUARD_URL", "http://127.0.0.1:8787")


async def ask_model(prompt: str) -> dict:  # stands in for: await AsyncOpenAI().chat.completions.create(...)
    return {"choices": [{"message": {"content": "Paris"}}], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}


async def main() -> None:
    async with GuardClient(API_KEY, BASE_URL) as client:
        try:
            async with client.run("user-123", metadata={"ticket": 42}) as run:
                reply = await run.model_call(lambda: ask_model("Capital of France?"), "gpt-4o-mini",
                                             input_data={"prompt": "Capital of France?"},
                                             token_extractor=extractors.openai)
                city = reply["choices"][0]["message"]["content"]
                hits = await run.tool_call(lambda: [f"https://en.wikipedia.org/wiki/{city}"], "search")
            print(f"run {run.id} completed: {city} {hits}")
        except GuardBlockedError as blocked:  # a guardrail said no; nothing inside the block ran after it
            print(f"blocked: {blocked.deny_reason}: {blocked.reason}")


asyncio.run(main())
