"""A config path that holds a FIFO or a device is refused at once (issue 42): `check` and
`run` exit with the reason instead of waiting for a writer that never comes, or reading
``/dev/zero`` until memory runs out. The same for ``web.config_file`` and the PEM files
it names. Real processes: a hang is what is under test."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.proc

HANG_GUARD_S = 60  # a guard against the hang under test, not a timing: the answer takes well under a second
MEMORY_CAP = 4 << 30  # the process under test may not take the machine's memory (/dev/zero read whole)


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def agentd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentd", *args], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={"PATH": "/usr/bin:/bin"}, preexec_fn=_cap_memory)


def free_listen() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "sys").mkdir(parents=True)
    return r


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("make,kind", [(fifo, "a FIFO"), (zero_link, "a character device")])
def test_check_refuses_a_config_that_is_not_a_regular_file(tmp_path: Path, root: Path, make, kind: str) -> None:
    cfg = make(tmp_path / "agentd.toml")
    p = agentd("check", "--config", str(cfg), "--host-root", str(root))
    assert p.returncode == 3, p.stderr
    assert f"config file {cfg} is {kind}, not a regular file" in p.stderr
    assert "internal error" not in p.stderr


def test_run_refuses_a_config_fifo(tmp_path: Path, root: Path) -> None:
    cfg = fifo(tmp_path / "agentd.toml")
    p = agentd("run", "--config", str(cfg), "--host-root", str(root), "--listen", free_listen())
    assert p.returncode == 3 and "is a FIFO, not a regular file" in p.stderr, p.stderr


def test_a_config_past_the_size_cap_is_refused(tmp_path: Path, root: Path) -> None:
    cfg = tmp_path / "agentd.toml"
    cfg.write_text("# padding\n" * ((2 << 20) // 10))  # 2 MiB of comments: valid TOML, but no config file is that big
    p = agentd("check", "--config", str(cfg), "--host-root", str(root))
    assert p.returncode == 3 and "is larger than 1048576 bytes" in p.stderr, p.stderr


@pytest.mark.parametrize("make,kind", [(fifo, "a FIFO"), (zero_link, "a character device")])
def test_run_refuses_a_web_config_that_is_not_a_regular_file(tmp_path: Path, root: Path, make, kind: str) -> None:
    web = make(tmp_path / "web.yml")
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'[web]\nconfig_file = "{web}"\n')
    p = agentd("run", "--config", str(cfg), "--host-root", str(root), "--listen", free_listen())
    assert p.returncode == 3, p.stderr  # the HTTP server cannot start: agentd could not run
    assert "agentd: cannot serve on" in p.stderr
    assert f"web config {web} is {kind}, not a regular file" in p.stderr


def test_a_certificate_fifo_is_a_web_config_error_not_a_hang(tmp_path: Path) -> None:
    fifo(tmp_path / "server.pem")
    (tmp_path / "server.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n")
    # In a child process: before the fix the read blocks for ever, and the guard kills it.
    code = ("import sys\nfrom agentd.daemon.webconfig import WebConfigError, load_web_config\n"
            f"try:\n    load_web_config({str(web)!r})\nexcept WebConfigError as e:\n    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert "tls_server_config.cert_file: cannot read" in p.stdout and "is a FIFO, not a regular file" in p.stdout, (p.stdout, p.stderr)
