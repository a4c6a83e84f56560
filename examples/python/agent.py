"""An agent in Python, guarded in proxy mode, with nothing but the standard library.

Wrapped in `runguard exec`, it finds the run's proxy URL in OPENAI_BASE_URL and calls the
OpenAI chat API through it; runguard checks the call, forwards it and records its tokens and cost.

    npx runguard exec --user alice -- python3 examples/python/agent.py "What is runguard?"

The official `openai` package reads OPENAI_BASE_URL the same way: with it installed,
`openai.OpenAI().chat.completions.create(...)` needs no change either.
"""
import json
import os
import sys
import urllib.error
import urllib.request

base_url = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
question = sys.argv[1] if len(sys.argv) > 1 else "Say hello in five words."
body = {
    "model": os.environ.get("AGENT_MODEL", "gpt-4o-mini"),
    "messages": [{"role": "user", "content": question}],
}
request = urllib.request.Request(
    f"{base_url}/chat/completions",
    data=json.dumps(body).encode(),
    headers={
        "Content-Type": "application/json",
        "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}",
    },
)
try:
    with urllib.request.urlopen(request, timeout=120) as response:
        reply = json.load(response)
except urllib.error.HTTPError as error:
    # A denial is a 403 in OpenAI's error format; its code is runguard's deny reason.
    detail = json.load(error).get("error", {})
    print(f"denied ({error.code}): {detail.get('code')}: {detail.get('message')}", file=sys.stderr)
    sys.exit(3)
print(reply["choices"][0]["message"]["content"])
print(f"tokens: {reply['usage']['prompt_tokens']} in, {reply['usage']['completion_tokens']} out")
