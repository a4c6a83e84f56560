"""The README's Python example, as a file, runs unchanged against a daemon started as `npm start`
starts it: embedded database, the key saved to `.runguard/api-key` under the daemon's directory."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from .support.daemon import REPO_ROOT, Daemon, start_daemon

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLE = PACKAGE / "examples" / "quickstart.py"


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


def test_the_readme_shows_the_example_file_verbatim() -> None:
    example = EXAMPLE.read_text()
    assert python_blocks((PACKAGE / "README.md").read_text())[0] == example
    # The repository's README, once it shows a Python example, shows this one.
    for block in python_blocks((REPO_ROOT / "README.md").read_text()):
        if "from runguard import" in block:
            assert block == example


@pytest.fixture(scope="module")
def npm_start_daemon() -> Iterator[tuple[Daemon, Path]]:
    workdir = Path(tempfile.mkdtemp(prefix="rg-pyexample-"))
    daemon = start_daemon(embedded=True, cwd=workdir)
    try:
        yield daemon, workdir
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run_example(workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in os.environ.items() if k not in ("RUNGUARD_API_KEY", "RUNGUARD_URL")}
    child_env["PYTHONPATH"] = str(PACKAGE / "src")
    child_env.update(env)
    return subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=workdir, env=child_env, capture_output=True, text=True, timeout=120
    )


def test_when_run_from_the_daemons_directory_then_it_reads_the_key_file_and_records_the_run(
    npm_start_daemon: tuple[Daemon, Path],
) -> None:
    daemon, workdir = npm_start_daemon
    assert (workdir / ".runguard" / "api-key").exists()
    done = run_example(workdir, {"RUNGUARD_URL": daemon.url})
    assert done.returncode == 0, done.stderr
    match = re.fullmatch(r"run (\S+) completed: Paris \['https://en.wikipedia.org/wiki/Paris'\]\n", done.stdout)
    assert match, done.stdout
    headers = {"Authorization": f"Bearer {daemon.api_key}"}
    run = httpx.get(f"{daemon.url}/v1/runs/{match.group(1)}", headers=headers, timeout=30).json()
    assert run["status"] == "COMPLETED" and run["user_id"] == "user-123" and run["metadata"] == {"ticket": 42}
    assert [(s["type"], s["status"]) for s in run["steps"]] == [("MODEL_CALL", "COMPLETED"), ("TOOL_CALL", "COMPLETED")]
    assert run["total_tokens"] == 15


def test_when_the_user_is_blocked_then_it_prints_the_denial(npm_start_daemon: tuple[Daemon, Path]) -> None:
    daemon, _ = npm_start_daemon
    headers = {"Authorization": f"Bearer {daemon.api_key}"}
    assert httpx.put(f"{daemon.url}/v1/users/user-123", json={"blocked": True}, headers=headers, timeout=30).status_code == 200
    try:
        elsewhere = Path(tempfile.mkdtemp(prefix="rg-pyexample-env-"))
        done = run_example(elsewhere, {"RUNGUARD_URL": daemon.url, "RUNGUARD_API_KEY": daemon.api_key})
        elsewhere.rmdir()
    finally:
        httpx.put(f"{daemon.url}/v1/users/user-123", json={"blocked": False}, headers=headers, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == 'blocked: USER_BLOCKED: Run start for user "user-123" was blocked: the user is blocked (USER_BLOCKED).\n'
