"""Real servers for the tests: a redis-server and `tollgate serve` processes
started here, on free ports, and stopped by pid at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional

import httpx
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent  # clients/python


def tollgate_bin() -> str:
    path = Path(os.environ.get("TOLLGATE_BIN", "../../target/debug/tollgate"))
    if not path.is_absolute():
        path = (ROOT / path).resolve()
    if not path.is_file():
        raise RuntimeError(f"tollgate binary not found at {path}: run `cargo build -p tollgate-server` "
                           "or set TOLLGATE_BIN")
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready after {seconds} s:\n{log.read_text()}")


class Server:
    """One `tollgate serve`; stop() and start() again keep its ports."""

    def __init__(self, workdir: Path, redis_url: Optional[str] = None, token: Optional[str] = None,
                 config: Optional[str] = None) -> None:
        self.port, self.proxy_port = free_port(), free_port()
        self.redis_url, self.token = redis_url, token
        self.config: Optional[Path] = None
        if config is not None:
            self.config = workdir / f"tollgate-{self.port}.toml"
            self.config.write_text(config)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"tollgate-{self.port}.log"
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def start(self) -> Server:
        args = [tollgate_bin(), "serve", "--listen", f"127.0.0.1:{self.port}",
                "--proxy-listen", f"127.0.0.1:{self.proxy_port}"]
        if self.redis_url:
            # A unique prefix per server keeps tests on one Redis apart.
            args += ["--redis", self.redis_url, "--prefix", f"t{self.port}"]
        else:
            # The embedded store keeps its log in a directory of its own.
            args += ["--data-dir", str(self.log.parent / f"tollgate-data-{self.port}")]
        if self.token:
            args += ["--token", self.token]
        if self.config:
            args += ["--config", str(self.config)]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        wait_http(self.url + "/healthz", self.proc, self.log)
        if self.redis_url:
            wait_http(self.url + "/readyz", self.proc, self.log)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tollgate-py-") as d:
        yield Path(d)


@pytest.fixture(scope="session")
def redis_url(workdir: Path) -> Iterator[str]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server not found on PATH: install it (the tests need a real Redis)")
    port = free_port()
    rdir = workdir / "redis"
    rdir.mkdir()
    log = rdir / "redis.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(rdir)], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session", params=["memory", "redis"])
def server(request: pytest.FixtureRequest, workdir: Path) -> Iterator[Server]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    srv = Server(workdir, url).start()
    yield srv
    srv.stop()


@pytest.fixture
def own_servers(workdir: Path) -> Iterator[List[Server]]:
    """Servers a test starts itself (to restart them); stopped afterwards."""
    started: List[Server] = []
    yield started
    for s in started:
        s.stop()
