"""The official mem0 client, for tests: a separate virtual environment with a pinned ``mem0ai``
(it pins protobuf<7, which ours cannot share), built on first use and cached outside the work
tree, keyed by the pin and the Python version; and a driver process (tests/mem0_driver.py) in it
that calls ``MemoryClient`` method by method.

The cache is ``$MNEMOSYNE_MEM0_CACHE`` or ``~/.cache/mnemosyne``; a venv is used only once its
``.complete`` marker exists (a build cut short is removed and built again)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

MEM0AI_PIN = "2.0.18"
DRIVER = Path(__file__).with_name("mem0_driver.py")
MEM0_HELPER = Path(__file__).resolve().parents[1] / "client" / "mem0.py"


def mem0_python() -> Path:
    """The interpreter of the cached mem0ai venv, building it first when it is missing."""
    cache = Path(os.environ.get("MNEMOSYNE_MEM0_CACHE") or Path.home() / ".cache" / "mnemosyne")
    venv = cache / f"mem0ai-{MEM0AI_PIN}-py{sys.version_info.major}.{sys.version_info.minor}"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    for step in (
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"mem0ai=={MEM0AI_PIN}"],
    ):
        built = subprocess.run(step, capture_output=True, text=True, timeout=600)
        if built.returncode != 0:
            raise AssertionError(
                f"cannot build the mem0ai venv in {venv} ({' '.join(step[-3:])} failed: is PyPI reachable?):\n"
                + built.stderr[-2000:]
            )
    (venv / ".complete").write_text(MEM0AI_PIN)
    return python


def mem0_environment(home: Path) -> dict[str, str]:
    """The environment of a mem0 client process: no telemetry, its config directory in ``home``."""
    return {**os.environ, "MEM0_TELEMETRY": "False", "MEM0_DIR": str(home / ".mem0"), "HOME": str(home)}


class Mem0Client:
    """``mem0.MemoryClient(api_key=..., host=...)`` in its own process; ``call`` runs one method."""

    def __init__(
        self, host: str, api_key: str, home: Path, headers: dict[str, str] | None = None, *, helper: bool = False
    ) -> None:
        """``helper``: with Mnemosyne's session-consistency helper (client/mem0.py) applied."""
        helper_path = str(MEM0_HELPER) if helper else ""
        settings = json.dumps({"host": host, "api_key": api_key, "headers": headers or {}, "helper": helper_path})
        self._process = subprocess.Popen(
            [str(mem0_python()), str(DRIVER), settings],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=mem0_environment(home),
        )
        self.construction = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        assert line, "the mem0 driver ended without answering"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, method: str, **kwargs: Any) -> Any:
        """The method's result; AssertionError with the client's exception when it raised."""
        answer = self.attempt(method, **kwargs)
        assert "ok" in answer, answer
        return answer["ok"]

    def attempt(self, method: str, **kwargs: Any) -> dict[str, Any]:
        """{"ok": result} or {"error": class name, "message", "status"}."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps([method, kwargs]) + "\n")
        self._process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> Mem0Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
