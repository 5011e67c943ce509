"""The in-cluster agent (``agent/nodeflow_agent``) as a local subprocess, as the end-to-end tests,
the ingress benchmark and ``make demo`` run it: pointed at the control plane's API server and the sandbox's
Function URL, health endpoints on 127.0.0.1, JSON logs collected to a file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["AGENT_DIR", "AgentProcess", "free_port"]

AGENT_DIR = Path(__file__).resolve().parent.parent / "agent"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AgentProcess:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.health_port = free_port()
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(AGENT_DIR), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "HEALTH_BIND": "127.0.0.1",
            "HEALTH_PORT": str(self.health_port),
            "AGENT_NAME": "nodeflow-agent-local",
            **dict(env),
        }
        self._log: IO[Any] = tempfile.NamedTemporaryFile(prefix="nodeflow-agent-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AgentProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nodeflow_agent"], env=self.env, stdout=self._log, stderr=subprocess.STDOUT
        )
        return self

    def _get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def ready(self) -> bool:
        return self._get("/readyz") == 200

    def healthy(self) -> bool:
        return self._get("/healthz") == 200

    def metrics(self) -> dict[str, float]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    continue
        return out

    def wait_ready(self, timeout: float = 30.0) -> AgentProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.logs()[-4000:]}")
            if self.ready():
                return self
            time.sleep(0.05)
        raise TimeoutError(f"agent not ready within {timeout}s:\n{self.logs()[-4000:]}")

    def logs(self) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")

    def rss_kib(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the agent process in KiB."""
        assert self.proc is not None
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines() if ":" in line
        )
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (the agent flushes, then exits); kill if it does not. Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        Path(self._log.name).unlink(missing_ok=True)
