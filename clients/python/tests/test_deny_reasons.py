"""The client's deny sentences are the daemon's: runguard/_deny_reasons.py is generated from
src/contract/deny-reasons.ts (``npm run clients:generate``), and test/unit/contract/clients-generated.test.ts
fails while it is stale."""

from __future__ import annotations

from runguard import GuardBlockedError
from runguard._deny_reasons import DENY_SENTENCES


def test_when_a_reason_is_the_contracts_newest_then_the_blocked_error_explains_it() -> None:
    assert len(DENY_SENTENCES) >= 7
    newest = list(DENY_SENTENCES)[-1]
    blocked = GuardBlockedError("Model call", {"outcome": "DENY", "reason": newest}, user_id="u", run_id="r")
    assert blocked.reason == f"Model call was blocked: {DENY_SENTENCES[newest]} ({newest})."


def test_when_a_newer_daemon_sends_an_unknown_reason_then_the_error_names_it_generically() -> None:
    blocked = GuardBlockedError("Tool call", {"outcome": "DENY", "reason": "SOMETHING_NEW"}, user_id="u", run_id="r")
    assert blocked.reason == "Tool call was blocked: a guardrail denied it (SOMETHING_NEW)."
