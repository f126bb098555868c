"""How long a stopped server's process takes to end: SIGTERM to exit of an idle server.

    python -m bench.stop_time [--python PATH] [--runs 6]

Each run starts ``PATH -m mnemosyne.cli serve --data-dir D --embedder hashing --port 0
--metrics-port 0 --grace-seconds 1 --drain-delay-seconds 0`` with the HTTP port off and on (a free
port), waits 0.5 s once it serves, sends SIGTERM and times the exit. ``--python``: a Python whose
installed ``mnemosyne`` is the one to measure (default: this one). Prints the median and each run.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def stop_seconds(python: str, *, http: bool) -> float:
    """SIGTERM to exit of one idle server (exit status 0, else an error)."""
    with tempfile.TemporaryDirectory() as scratch:
        http_port = str(_free_port() if http else 0)
        command = [python, "-m", "mnemosyne.cli", "serve", "--data-dir", str(Path(scratch) / "data")]
        command += ["--embedder", "hashing", "--port", "0", "--metrics-port", "0", "--http-port", http_port]
        command += ["--grace-seconds", "1", "--drain-delay-seconds", "0"]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert server.stdout is not None
        server.stdout.readline()  # the "serving" line
        time.sleep(0.5)
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
        took = time.monotonic() - began
        if server.returncode != 0:
            raise SystemExit(f"the server exited {server.returncode}")
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    for http in (False, True):
        runs = sorted(stop_seconds(args.python, http=http) for _ in range(args.runs))
        print(
            f"HTTP port {'on ' if http else 'off'}: median {runs[len(runs) // 2]:.2f} s, runs {[round(t, 2) for t in runs]}"
        )


if __name__ == "__main__":
    main()
