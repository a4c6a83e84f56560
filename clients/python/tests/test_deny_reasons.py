"""The client's deny sentences are the daemon's: read from src/contract/deny-reasons.ts, the one
place the daemon and the TypeScript SDK take them from, so that a reason added or reworded there
fails here until the Python copy follows."""

from __future__ import annotations

import re
from pathlib import Path

from runguard import GuardBlockedError
from runguard.errors import _DENY_SENTENCES

CONTRACT = Path(__file__).resolve().parents[3] / "src" / "contract" / "deny-reasons.ts"


def _block(source: str, name: str) -> str:
    """The body of `export const <name> ... = [ ... ]` or `{ ... }` in the TypeScript source."""
    match = re.search(rf"export const {name}\b[^=]*=\s*([\[{{])(.*?)^[\]}}]", source, re.S | re.M)
    assert match, f"{name} not found in {CONTRACT}"
    return match.group(2)


def _contract() -> tuple[list[str], dict[str, str]]:
    source = CONTRACT.read_text(encoding="utf-8")
    reasons = re.findall(r"'([A-Z_]+)'", _block(source, "DENY_REASONS"))
    sentences = {
        code: single if single else double
        for code, single, double in re.findall(
            r"^\s*([A-Z_]+): (?:'([^']*)'|\"([^\"]*)\"),\s*$", _block(source, "DENY_SENTENCES"), re.M
        )
    }
    return reasons, sentences


def test_when_the_contract_is_read_then_it_lists_every_reason_with_a_sentence() -> None:
    reasons, sentences = _contract()
    assert len(reasons) >= 7
    assert list(sentences) == reasons


def test_when_the_daemon_lists_its_deny_reasons_then_the_client_has_the_same_sentences_in_order() -> None:
    reasons, sentences = _contract()
    assert list(_DENY_SENTENCES) == reasons
    assert _DENY_SENTENCES == sentences


def test_when_a_reason_is_the_contracts_newest_then_the_blocked_error_explains_it() -> None:
    reasons, sentences = _contract()
    newest = reasons[-1]
    blocked = GuardBlockedError("Model call", {"outcome": "DENY", "reason": newest}, user_id="u", run_id="r")
    assert blocked.reason == f"Model call was blocked: {sentences[newest]} ({newest})."
