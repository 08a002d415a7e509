"""Start the real ``agentd run`` process on a simulated node and talk to it over HTTP.

Shared by the fault-matrix, files-never-lost and load tests (the approach of
test_daemon_e2e.py: a private config with short intervals, NCCL files and the baseline
in a temp directory, ``--simulate PROFILE --sim-dir DIR``). Deadlines are bounded polls,
never assertions on how fast something was.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, TypeVar

from agentd.config import load_config
from agentd.outputs.managed import stable_text
from agentd.outputs.node_state import moved_paths, state_dir_for
from agentd.sim.build import pristine_root
from agentd.sim.faults import advancing_paths

ROOT = Path(__file__).resolve().parents[2]
# Generous bound for "the daemon reacts within a few cycles" on a loaded 2-core CI box:
# polls return as soon as the condition holds; the bound only stops a broken daemon
# from hanging the suite.
REACT_S = 20.0

T = TypeVar("T")


def config_text(*, fast_s: float = 0.2, medium_s: float = 0.4, slow_s: float = 0.8, nvml_s: float = 0.5,
                probe_s: float = 2.0, stale_after: float = 3.0, out: Path, nccl_dir: Path | None = None,
                extra: str = "") -> str:
    """A daemon config with short intervals; NCCL files under ``nccl_dir`` (default
    ``out``), baseline and state under ``out``. ``extra`` is appended verbatim (TOML
    sections such as ``[thresholds]``)."""
    nccl = nccl_dir or out
    return (
        f"[intervals]\nfast_s = {fast_s}\nmedium_s = {medium_s}\nslow_s = {slow_s}\n"
        f"stale_after = {stale_after}\nevent_debounce_s = 0.1\n\n"
        f"[timeouts]\nprobe_s = {probe_s}\nnvml_s = {nvml_s}\n\n"
        f'[paths]\nnccl_env = "{nccl}/nccl.env"\nnccl_conf = "{nccl}/nccl.conf"\nnccl_topo = "{nccl}/topo.xml"\n'
        f'baseline = "{out}/baseline.json"\nstate_dir = "{out}"\n\n'
        + extra
    )


def stop_process(proc: subprocess.Popen) -> int | None:
    """SIGTERM, then SIGKILL after 10 s; the exit code, or None when it had to be killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            return None
    return proc.returncode


def agentd_cmd() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "agentd"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "agentd"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, *, timeout: float = 5.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Accept-Encoding": "identity", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def poll(pred: Callable[[], T], limit_s: float = REACT_S, step: float = 0.05) -> T | None:
    """Call ``pred`` until it returns something truthy (returned) or ``limit_s`` passes
    (the last falsy value is returned)."""
    deadline = time.monotonic() + limit_s
    last = None
    while True:
        last = pred()
        if last or time.monotonic() >= deadline:
            return last
        time.sleep(step)


def ib_hca(env: Path) -> list[str]:
    """The ports NCCL_IB_HCA lists in a nccl.env ([] when the file or variable is absent)."""
    try:
        text = env.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("export NCCL_IB_HCA="):
            return line.split("=", 1)[1].strip("'\"").lstrip("=").split(",")
    return []


def metric_value(text: str, series: str) -> float | None:
    """The value of one exact series line (``name{labels}``) in an exposition."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line[len(series) + 1:])
    return None


def sim_root(tmp: Path) -> Path:
    """The simulated root of an ``Agent(tmp)``."""
    return tmp / "root"


def sim_state_dir(tmp: Path) -> Path:
    """Where an ``Agent(tmp)`` writes its NCCL files, baseline and state: a simulated root
    is not the node, so ``agentd run`` moves every ``paths.*`` beside it, whatever the
    config says (agentd.outputs.node_state)."""
    return state_dir_for(sim_root(tmp))


class Agent:
    """One ``agentd run --simulate PROFILE`` process with its tree, config and log.
    ``nofile``: its RLIMIT_NOFILE (systemd's default soft limit is 1024). Its outputs are
    in ``out`` (``sim_state_dir(tmp)``): ``env_file`` is the nccl.env it writes."""

    def __init__(self, tmp: Path, *, profile: str = "h100-ib", config: str | None = None, faults: tuple[str, ...] = (),
                 nofile: int | None = None, **intervals: Any):
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp
        self.profile = profile
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.root = sim_root(tmp)
        self.out = sim_state_dir(tmp)
        self.out.mkdir(exist_ok=True)
        self.baseline_env: str | None = None  # stable text of nccl.env on the healthy node (set by tests)
        self.config_path = tmp / "agentd.toml"
        # the config's own paths stand for the node's: the daemon never writes them here
        self.config_path.write_text(config if config is not None else config_text(out=tmp / "node", **intervals))
        env_path = moved_paths(load_config(self.config_path, environ={}).paths, self.out)["nccl_env"]
        assert env_path is not None
        self.env_file = Path(env_path)
        self.log_path = tmp / "agentd.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        self._log = open(self.log_path, "wb")
        cmd = [*agentd_cmd(), "run", "--config", str(self.config_path), "--simulate", profile, "--sim-dir", str(self.root),
               "--listen", f"127.0.0.1:{self.port}"]
        for f in faults:
            cmd += ["--fault", f]
        limit = None if nofile is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, preexec_fn=limit)

    # -- lifecycle ------------------------------------------------------------------
    def wait_ready(self, limit_s: float = 60.0) -> "Agent":
        def ready() -> bool:
            if self.proc.poll() is not None:
                return True
            try:
                return http_get(self.base + "/readyz", timeout=2)[0] == 200
            except OSError:
                return False

        if not (poll(ready, limit_s, 0.1) and self.proc.poll() is None):
            self.stop()
            raise AssertionError(f"agentd did not become ready:\n{self.logs()}")
        return self

    def stop(self) -> int | None:
        try:
            return stop_process(self.proc)
        finally:
            self._log.close()

    def __enter__(self) -> "Agent":
        return self.wait_ready()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def events_since(self, offset: int, *words: str) -> str:
        """Log lines written after byte ``offset`` that contain any of ``words`` (all when none)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(line[:500] for line in lines if not words or any(w in line for w in words))

    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- HTTP -----------------------------------------------------------------------
    def get(self, path: str, **kw: Any) -> tuple[int, bytes]:
        return http_get(self.base + path, **kw)

    def health(self) -> tuple[int, dict]:
        code, body = self.get("/health")
        return code, json.loads(body)

    def findings(self) -> tuple[int, set[tuple[str, str, str]]]:
        """(/health status code, {(code, severity, subject)})."""
        code, body = self.health()
        return code, {(f["code"], f["severity"], f["subject"]) for f in body["findings"]}

    def checks(self) -> set[tuple[str, str, str]]:
        """Every current finding, ok-severity facts included (/checks)."""
        _, body = self.get("/checks")
        return {(f["code"], f["severity"], f["subject"]) for f in json.loads(body)["findings"]}

    def metrics(self) -> str:
        code, body = self.get("/metrics")
        assert code == 200, code
        return body.decode()


# -- metrics text ------------------------------------------------------------------
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str, **labels: str) -> list[float]:
    """Values of the series of family ``name`` whose labels include ``labels``."""
    out = []
    want = {k: str(v) for k, v in labels.items()}
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest.startswith("{"):
            head, _, value = rest.rpartition("} ")
            got = dict(_LABEL_RE.findall(head))
        elif rest.startswith(" "):
            got, value = {}, rest[1:]
        else:
            continue  # a longer family name with this prefix
        if all(got.get(k) == v for k, v in want.items()):
            out.append(float(value))
    return out


def sample(text: str, name: str, **labels: str) -> float | None:
    """The first matching value (None when the series is absent)."""
    got = samples(text, name, **labels)
    return got[0] if got else None


def finding_series(code: str, severity: str, subject: str) -> str:
    return f'agentd_finding{{code="{code}",severity="{severity}",subject="{subject}"}} 1'


def health_consistent(code: int, body: dict) -> bool:
    """/health semantics: 503 exactly when a finding is critical (stale data included)."""
    critical = any(f["severity"] == "critical" for f in body["findings"])
    return code == (503 if critical else 200) and body["status"] in (("critical",) if critical else ("ok", "degraded"))


class Daemons:
    """One daemon per profile, started on first use (and at rest: 200 ok, no findings); the
    previous profile's is stopped. ``baseline_env`` holds the healthy nccl.env's stable text."""

    def __init__(self, tmp: Path, extra_config: str = "", profile_config: dict[str, str] | None = None):
        self.tmp = tmp
        self.extra_config = extra_config
        self.profile_config = profile_config or {}  # profile -> config text appended for its daemon
        self.agent: Agent | None = None
        self.starts = 0

    def get(self, profile: str, *, restart: bool = False) -> Agent:
        if self.agent is not None and (self.agent.profile != profile or restart or not self.agent.alive()):
            self.agent.stop()
            self.agent = None
        if self.agent is None:
            self.starts += 1
            d = self.tmp / f"{profile}-{self.starts}"
            cfg = config_text(out=d / "node", extra=self.extra_config + self.profile_config.get(profile, ""))
            self.agent = Agent(d, profile=profile, config=cfg).wait_ready()
            a = self.agent
            ok = poll(lambda: at_rest(a), REACT_S)
            assert ok, f"fresh {profile} daemon is not ok: {a.findings()}\n{a.logs()}"
            a.baseline_env = stable_text(a.env_file.read_text())
        return self.agent

    def close(self) -> None:
        if self.agent is not None:
            self.agent.stop()


def at_rest(a: Agent) -> bool:
    code, body = a.health()
    return code == 200 and body["status"] == "ok" and not body["findings"] and body["stale_probes"] == [] and a.env_file.exists()


def reset_counters(root: Path, spec: str) -> None:
    """Put the counter files a fault advanced (and clearing leaves advanced) back to the
    profile's values, atomically: what `nvidia-smi nvlink -r` or a driver reload does."""
    profile = json.loads((root / ".agentd" / "simulation.json").read_text())["profile"]
    pristine = pristine_root(profile)
    for rel in advancing_paths(root, spec):
        tmp = root / (rel + ".reset-tmp")
        shutil.copyfile(pristine / rel, tmp)
        os.replace(tmp, root / rel)
