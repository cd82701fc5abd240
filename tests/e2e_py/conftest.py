"""Starts one `tandem serve` on the default pipeline for the whole e2e session."""
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))


def _tandem_bin() -> str:
    if os.environ.get("TANDEM_BIN"):
        return os.environ["TANDEM_BIN"]
    for build in sorted(ROOT.glob("build*/cli/tandem")):
        return str(build)
    pytest.skip("no tandem executable: set TANDEM_BIN")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, extra_args=()):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        pipeline = os.environ.get("TANDEM_PIPELINE", str(ROOT / "pipelines" / "default.yaml"))
        self.proc = subprocess.Popen(
            [_tandem_bin(), "serve", "--pipeline", pipeline, "--port", str(self.port), *extra_args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True).start()
        self._wait_ready()

    def _drain(self, pipe):
        for line in pipe:
            self.log.append(line)

    def _wait_ready(self):
        deadline = time.time() + 180
        line = self.proc.stdout.readline()  # blocks until "serving on ..." or exit
        if not line.startswith("serving on"):
            self.proc.kill()
            raise RuntimeError(f"tandem serve did not start: {line!r}\n{''.join(self.log[-30:])}")
        assert line.strip() == f"serving on {self.url}"
        while time.time() < deadline:
            if httpx.get(self.url + "/health").status_code == 200:
                return
            time.sleep(0.2)
        raise RuntimeError("/health never became 200")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    rc = s.stop()
    assert rc == 0, "tandem serve did not exit 0 on SIGTERM:\n" + "".join(s.log[-30:])


@pytest.fixture(scope="session")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def aclient(server):
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def model(client):
    return client.models.list().data[0].id
