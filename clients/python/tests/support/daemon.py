"""The real daemon as a child process (``node bin/runguard start``), as the TypeScript client's tests
start it (test/support/daemon-process.ts): the built ``dist/`` on a free loopback port, against a
fresh Postgres database and a Redis key prefix of its own, or the embedded database in a temp dir.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import httpx

REPO_ROOT = Path(__file__).resolve().parents[4]
BIN = REPO_ROOT / "bin" / "runguard"
BUILT_CLI = REPO_ROOT / "dist" / "cli" / "main.js"
SERVICES = Path(__file__).resolve().parent / "services.mjs"
NODE = shutil.which("node") or "node"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _services(*args: str) -> str:
    done = subprocess.run([NODE, str(SERVICES), *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"services.mjs {' '.join(args)} failed (are Postgres and Redis up?):\n{done.stderr}")
    return done.stdout.strip()


@dataclass
class Daemon:
    url: str
    api_key: str
    data_dir: Path
    process: subprocess.Popen  # type: ignore[type-arg]
    log_path: Path
    database_url: Optional[str] = None
    redis_key_prefix: Optional[str] = None
    _closed: bool = field(default=False, repr=False)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.database_url:
            _services("drop-database", self.database_url)
        if self.redis_key_prefix:
            _services("delete-keys", self.redis_key_prefix)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_daemon(*, embedded: bool = False, env: Optional[dict[str, str]] = None, cwd: Optional[Path] = None) -> Daemon:
    """Starts a daemon and waits for /health. ``embedded``: no DATABASE_URL nor REDIS_URL, the
    ``npm start`` default. ``cwd``: where it runs (its default data dir is ``<cwd>/.runguard``)."""
    if not BUILT_CLI.exists():
        raise RuntimeError(f"{BUILT_CLI} is missing: build first (npm run build, or npm test).")
    data_dir = Path(tempfile.mkdtemp(prefix="rg-pydaemon-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    child_env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    child_env.update(
        RUNGUARD_LOG_LEVEL="warn",
        # Every test registers a workspace of its own; the default limit is meant for people.
        RUNGUARD_AUTH_RATE_LIMIT_PER_MINUTE="100000",
        # Registration hashes a password per test; the production cost only slows the suite.
        RUNGUARD_SCRYPT_COST="1024",
    )
    database_url = None
    prefix = None
    if not embedded:
        database_url = _services("create-database")
        prefix = f"rgpy:{secrets.token_hex(6)}:"
        child_env.update(
            DATABASE_URL=database_url,
            REDIS_URL=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379"),
            RUNGUARD_REDIS_KEY_PREFIX=prefix,
        )
    if cwd is None:
        child_env["RUNGUARD_DATA_DIR"] = str(data_dir)
    child_env.update(env or {})
    log_path = data_dir / "daemon.log"
    log = open(log_path, "wb")
    process = subprocess.Popen(
        [NODE, str(BIN), "start", "--port", str(port), "--host", "127.0.0.1"],
        cwd=cwd or REPO_ROOT,
        env=child_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    daemon = Daemon(url, "", data_dir, process, log_path, database_url, prefix)
    try:
        _wait_healthy(daemon)
        key_file = (cwd / ".runguard" / "api-key") if cwd is not None else data_dir / "api-key"
        daemon.api_key = key_file.read_text().strip()
    except BaseException:
        daemon.stop()
        raise
    return daemon


def _wait_healthy(daemon: Daemon) -> None:
    # Generous: the embedded database initialises slowly on a busy machine.
    deadline = time.monotonic() + 180
    while True:
        if daemon.process.poll() is not None:
            raise RuntimeError(f"The daemon exited during start:\n{daemon.output()}")
        try:
            if httpx.get(f"{daemon.url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"The daemon did not answer /health within 180 s:\n{daemon.output()}")
        time.sleep(0.05)
