#!/usr/bin/env python3
"""``make gpu-check``: one bounded run on a machine with an NVIDIA GPU that records what
agentd, nvidia-smi and NCCL each see there, into one output folder (docs/gpu-check.md).

It runs where a device machine is lent only for minutes (tests/gpu/README.md), so:

- one command, an overall budget (``--budget``, 330 s by default) and a timeout on every
  step; a step that fails or runs out is recorded (its exit status, the end of its stderr)
  and the others go on;
- the output folder holds few files, each well under 16 MiB: ``summary.json`` (what ran,
  what failed and why, rewritten after every step, so a run cut short still says how far
  it got), ``bundle.tar.gz`` (every raw output and log, rebuilt after every step) and
  ``capture.tar.gz`` (the redacted ``agentd capture``, the fixture to commit);
- no network: agentd's dependencies come as wheels downloaded beforehand (``make
  gpu-wheels``), installed with pip into the scratch folder (``--target``) and put on
  ``PYTHONPATH`` with the repository, so the image's torch, NCCL and NVML stay as they are;
- nothing outside its scratch folder is written: agentd's configuration points every path
  (NCCL files, baseline, state directory) there, and the daemon listens on a free
  loopback port.

Without a GPU it prints ``no GPU: skipped`` and exits 0 (CI runs that path); ``--force``
runs every step anyway (each GPU step then fails and is recorded), which is how the script
itself is tested. The comparison runs elsewhere, on the folder: ``python -m
tests.gpu.compare DIR``.

Only the standard library: this runs before agentd's dependencies are installed, under the
device image's Python 3.12 as under CI's 3.11.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEFAULT_WHEELS = REPO / ".gpu-wheels"

BUDGET_S = 330.0  # the whole run; the issue asks for <= 6 minutes, the device tool allows 10 per command
DAEMON_WAIT_S = 120.0  # the daemon's /metrics and /health are read this long after it started
RESERVE_S = 25.0  # kept back from every step for the daemon's scrape and stop and the bundle
STDERR_TAIL = 4000  # characters of a failed step's stderr kept in summary.json
MEMBER_MAX = 8 << 20  # a raw file larger than this goes into the bundle truncated (and says so)
OUT_FILE_MAX = 15 << 20  # the device tool brings back files of at most 16 MiB

# Output folder names (summary.json's "files"); the bundle's members are the raw names below.
SUMMARY, BUNDLE, CAPTURE = "summary.json", "bundle.tar.gz", "capture.tar.gz"

# Raw outputs, by the name the comparison reads them under (tests/gpu/compare.py RAW).
RAW_SMI_LIST = "nvidia-smi-L.txt"
RAW_SMI_XML = "nvidia-smi-q.xml"
RAW_SMI_TEXT = "nvidia-smi-q.txt"
RAW_SMI_TOPO = "nvidia-smi-topo-m.txt"
RAW_SMI_NVLINK = "nvidia-smi-nvlink-s.txt"
RAW_SMI_PCIE = "nvidia-smi-q-pcie.txt"
RAW_INSPECT = "inspect.json"
RAW_CHECK = "check.json"
RAW_TOPO = "agentd-topo.xml"  # agentd's NCCL topology XML, as `agentd render` wrote it
RAW_NCCL_ENV = "agentd-nccl.env"
RAW_NCCL_A = "nccl-a.xml"  # NCCL's own view (NCCL_TOPO_DUMP_FILE, no NCCL_TOPO_FILE)
RAW_NCCL_B = "nccl-b.xml"  # NCCL's view with NCCL_TOPO_FILE=agentd's XML
RAW_NCCL_A_LOG = "nccl-a.log"
RAW_NCCL_B_LOG = "nccl-b.log"
RAW_NCCL_A_FIRST_LOG = "nccl-a-first.log"  # a first run that could not bootstrap, before the one on loopback
RAW_NCCL_A_JSON = "nccl-a.json"  # tests/gpu/nccl_init.py's answer
RAW_NCCL_B_JSON = "nccl-b.json"
RAW_BENCH = "bench.json"
RAW_BENCH_REFUSED = "bench-refused.json"  # the first run's answer when it was refused and run again with --force
RAW_METRICS = "metrics.txt"
RAW_HEALTH = "health.json"
RAW_DAEMON_LOG = "daemon.log"

# What NCCL is told in both runs: INFO with the subsystems that say what it read and detected.
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH"}
# Variables that would change what NCCL reads or does, removed from both runs' environment.
NCCL_CLEARED = ("NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_DEBUG_FILE", "NCCL_GRAPH_FILE", "NCCL_DEBUG_SUBSYS")
BENCH_OPS = "all_reduce,all_gather,reduce_scatter"
BENCH_SIZES = "1M,16M,64M,256M"
BENCH_TIME_LIMIT_S = 150


@dataclass
class Step:
    """One step as summary.json records it."""

    name: str
    status: str  # ok | failed | timeout | error | skipped
    argv: list[str] = field(default_factory=list)
    rc: int | None = None
    seconds: float = 0.0
    reason: str = ""  # why it failed or was skipped, one line
    stderr_tail: str = ""
    outputs: list[str] = field(default_factory=list)  # raw names it wrote

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class GpuProbe:
    """Whether this machine has an NVIDIA GPU, and how that was decided."""

    present: bool
    count: int
    how: str
    smi: str | None  # the nvidia-smi found, if any
    listing: str = ""  # nvidia-smi -L's output


def find_smi(path: str | None = None) -> str | None:
    """nvidia-smi on PATH, else where container images of NVIDIA's put it."""
    found = shutil.which("nvidia-smi", path=path)
    if found:
        return found
    for candidate in ("/usr/local/nvidia/bin/nvidia-smi", "/usr/bin/nvidia-smi"):
        if path is None and os.access(candidate, os.X_OK):
            return candidate
    return None


def probe_gpu(*, smi: str | None, proc_gpus: Path = Path("/proc/driver/nvidia/gpus"),
              run: Callable[[Sequence[str], float], tuple[int, str]] | None = None) -> GpuProbe:
    """An NVIDIA GPU is present when ``nvidia-smi -L`` lists one, or (nvidia-smi missing or
    failing) when the driver lists one under /proc/driver/nvidia/gpus."""
    run = run or _run_capture
    listing = ""
    if smi is not None:
        rc, listing = run([smi, "-L"], 30.0)
        gpus = [line for line in listing.splitlines() if line.startswith("GPU ")]
        if rc == 0 and gpus:
            return GpuProbe(True, len(gpus), "nvidia-smi -L", smi, listing)
    try:
        driver_gpus = sorted(p.name for p in proc_gpus.iterdir())
    except OSError:
        driver_gpus = []
    if driver_gpus:
        return GpuProbe(True, len(driver_gpus), f"{proc_gpus} lists {len(driver_gpus)}", smi, listing)
    why = "no nvidia-smi" if smi is None else "nvidia-smi -L lists no GPU"
    return GpuProbe(False, 0, f"{why}, and {proc_gpus} lists none", smi, listing)


def _run_capture(argv: Sequence[str], timeout: float) -> tuple[int, str]:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)
    return p.returncode, p.stdout


# ---------------------------------------------------------------------------
# what the steps run (pure: argument lists and file contents)


def pip_install_argv(python: str, wheels: Sequence[Path], target: Path) -> list[str]:
    """pip, offline, every wheel into ``target`` (no dependency resolution: the wheel set is
    complete, one version of each, as tests/gpu/wheels.py downloads it)."""
    return [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
            "--no-cache-dir", "--disable-pip-version-check", "--target", str(target), *map(str, wheels)]  # fmt: skip


def agentd_env(base: Mapping[str, str], site: Path | None) -> dict[str, str]:
    """The environment agentd's commands run with: the repository (and the installed
    wheels, when there are any) first on PYTHONPATH, agentd's own AGENTD_* variables removed
    (the config file says everything), output unbuffered."""
    env = {k: v for k, v in base.items() if not k.startswith("AGENTD_")}
    parts = [str(REPO)] + ([str(site)] if site is not None else []) + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def nccl_env(base: Mapping[str, str], *, dump: Path, log: Path, topo_file: Path | None, socket_ifname: str | None) -> dict[str, str]:
    """The environment of one NCCL initialisation: INFO logs into ``log``, the topology NCCL
    ends up with into ``dump``, and NCCL_TOPO_FILE only when given."""
    env = {k: v for k, v in base.items() if k not in NCCL_CLEARED}
    env.update(NCCL_DEBUG_ENV)
    env["NCCL_DEBUG_FILE"] = str(log)
    env["NCCL_TOPO_DUMP_FILE"] = str(dump)
    if topo_file is not None:
        env["NCCL_TOPO_FILE"] = str(topo_file)
    if socket_ifname is not None:
        env["NCCL_SOCKET_IFNAME"] = socket_ifname
    return env


def config_toml(root: Path) -> str:
    """An agentd configuration whose every written path is under ``root``: nothing in /etc
    or /var/lib of the machine it runs on."""
    paths = {
        "nccl_env": root / "nccl.env",
        "nccl_conf": root / "nccl.conf",
        "nccl_topo": root / "nccl" / "topo.xml",
        "baseline": root / "baseline.json",
        "state_dir": root / "state",
    }
    lines = ["# written by tests/gpu/gpu_check.py: every path in its scratch folder", "[paths]"]
    lines += [f"{key} = {json.dumps(str(value))}" for key, value in paths.items()]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------
# the run


class Run:
    """The output folder, the scratch folder and the steps recorded so far."""

    def __init__(self, out: Path, scratch: Path, budget_s: float, clock: Callable[[], float] = time.monotonic):
        self.out = out
        self.scratch = scratch
        self.raw = scratch / "raw"
        self.raw.mkdir(parents=True, exist_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self.t0 = clock()
        self.budget_s = budget_s
        self.steps: list[Step] = []
        self.meta: dict[str, object] = {
            "started_at": time.time(),
            "budget_s": budget_s,
            "python": sys.executable,
            "python_version": sys.version.split()[0],
            "argv": sys.argv,
        }

    # time -----------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def timeout_for(self, wanted: float, reserve: float = RESERVE_S) -> float:
        """A step's timeout: what it wants, but never past the budget less the reserve."""
        return max(0.0, min(wanted, self.left() - reserve))

    # recording ------------------------------------------------------------
    def record(self, step: Step) -> Step:
        self.steps.append(step)
        mark = "ok" if step.ok else f"{step.status.upper()}: {step.reason}"
        print(f"[{self.elapsed():6.1f}s] {step.name}: {mark}", flush=True)
        self.flush()
        return step

    def skip(self, name: str, reason: str) -> Step:
        return self.record(Step(name, "skipped", reason=reason))

    def summary(self) -> dict[str, object]:
        failed = {s.name: s.reason for s in self.steps if s.status in ("failed", "timeout", "error")}
        return {
            **self.meta,
            "elapsed_s": round(self.elapsed(), 1),
            "steps": [asdict(s) for s in self.steps],
            "failed": failed,
            "skipped": {s.name: s.reason for s in self.steps if s.status == "skipped"},
            "files": sorted({p.name for p in self.out.iterdir() if p.is_file() and not p.name.startswith(".")} | {SUMMARY}),
        }

    def flush(self) -> None:
        """summary.json and bundle.tar.gz as they stand: a run cut short keeps both."""
        try:
            write_bundle(self.raw, self.out / BUNDLE)
        except OSError as e:
            self.meta["bundle_error"] = str(e)
        _write_atomic(self.out / SUMMARY, json.dumps(self.summary(), indent=2, sort_keys=True).encode() + b"\n")

    # processes ------------------------------------------------------------
    def run(self, name: str, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
            stdout: str | None = None, ok_codes: Sequence[int] = (0,), outputs: Sequence[str] = ()) -> Step:
        """One process in a session of its own: stdout into raw/``stdout`` (when named),
        stderr kept; past ``timeout`` the whole session gets SIGTERM, then SIGKILL."""
        t = self.timeout_for(timeout)
        if t <= 1:
            return self.skip(name, f"no time left in the {self.budget_s:.0f} s budget")
        err_path = self.raw / f"{name}.stderr"
        out_path = self.raw / stdout if stdout else None
        start = self.clock()
        step = Step(name, "ok", argv=list(map(str, argv)))
        try:
            with open(err_path, "wb") as err, (open(out_path, "wb") if out_path else open(os.devnull, "wb")) as out:
                proc = subprocess.Popen(list(argv), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                        env=dict(env) if env is not None else None, start_new_session=True, cwd=REPO)  # fmt: skip
                try:
                    step.rc = proc.wait(timeout=t)
                except subprocess.TimeoutExpired:
                    stop_session(proc)
                    step.status, step.reason = "timeout", f"still running after {t:.0f} s: stopped"
                except BaseException:  # SIGTERM to the run (SystemExit): the step's processes go with it
                    stop_session(proc)
                    raise
        except OSError as e:
            step.status, step.reason = "error", f"could not start: {e}"
        step.seconds = round(self.clock() - start, 2)
        step.stderr_tail = _tail(err_path)
        if step.status == "ok" and step.rc not in ok_codes:
            step.status = "failed"
            step.reason = f"exit status {step.rc}" + (f": {_last_line(step.stderr_tail)}" if step.stderr_tail.strip() else "")
        step.outputs = [o for o in ([stdout] if stdout else []) + list(outputs) if (self.raw / o).exists()]
        return self.record(step)


def stop_session(proc: subprocess.Popen[bytes], grace: float = 5.0) -> int | None:
    """SIGTERM to the process's session, SIGKILL after ``grace``; its exit status."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return None


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - STDERR_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_bundle(raw: Path, dest: Path) -> None:
    """Every regular file of ``raw`` (one level, sorted) into one tar.gz, each at most
    MEMBER_MAX bytes (a longer one is cut and its name says so)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(raw.iterdir()):
            if not p.is_file() or p.is_symlink():
                continue
            with open(p, "rb") as f:
                data = f.read(MEMBER_MAX + 1)
            name = p.name if len(data) <= MEMBER_MAX else f"{p.name}.truncated"
            info = tarfile.TarInfo(name)
            info.size = min(len(data), MEMBER_MAX)
            info.mtime = int(p.stat().st_mtime)
            tar.addfile(info, io.BytesIO(data[:MEMBER_MAX]))
    _write_atomic(dest, buf.getvalue())


# ---------------------------------------------------------------------------
# the steps


@dataclass
class Options:
    out: Path
    scratch: Path | None
    wheels: Path
    budget_s: float = BUDGET_S
    daemon_wait_s: float = DAEMON_WAIT_S
    force: bool = False
    keep_scratch: bool = False
    skip: frozenset[str] = frozenset()  # step groups: smi, agentd, nccl, bench, daemon
    python: str = sys.executable


STEP_GROUPS = ("smi", "agentd", "nccl", "bench", "daemon")


def setup_agentd(run: Run, opts: Options) -> dict[str, str] | None:
    """Install the wheels into scratch/site (when there are any) and check that agentd
    starts with them; the environment agentd's commands run with, or None."""
    wheels = sorted(opts.wheels.glob("*.whl")) if opts.wheels.is_dir() else []
    site: Path | None = None
    if wheels:
        site = run.scratch / "site"
        run.run("setup-wheels", pip_install_argv(opts.python, wheels, site), timeout=120)
    else:
        run.skip("setup-wheels", f"no wheels in {opts.wheels}: agentd's dependencies must be installed already")
    env = agentd_env(os.environ, site)
    step = run.run("setup-agentd", [opts.python, "-m", "agentd", "--version"], timeout=60, env=env, stdout="agentd-version.txt")
    return env if step.ok else None


def smi_steps(run: Run, probe: GpuProbe) -> None:
    if probe.listing:
        (run.raw / RAW_SMI_LIST).write_text(probe.listing)
    smi = probe.smi
    if smi is None:
        for name in ("smi-q-x", "smi-q", "smi-topo-m", "smi-nvlink-s", "smi-q-pcie"):
            run.record(Step(name, "error", reason="nvidia-smi not found"))
        return
    run.run("smi-q-x", [smi, "-q", "-x"], timeout=60, stdout=RAW_SMI_XML)
    run.run("smi-q", [smi, "-q"], timeout=60, stdout=RAW_SMI_TEXT)
    run.run("smi-topo-m", [smi, "topo", "-m"], timeout=30, stdout=RAW_SMI_TOPO)
    run.run("smi-nvlink-s", [smi, "nvlink", "-s"], timeout=30, stdout=RAW_SMI_NVLINK)
    run.run("smi-q-pcie", [smi, "-q", "-d", "PCIE"], timeout=30, stdout=RAW_SMI_PCIE)


def agentd_steps(run: Run, opts: Options, env: dict[str, str], config: Path) -> Path | None:
    """inspect, check, capture --redact and render; agentd's topology XML, if it wrote one."""
    py = [opts.python, "-m", "agentd"]
    cfg = ["--config", str(config)]
    run.run("agentd-inspect", [*py, "inspect", *cfg, "--format", "json"], timeout=60, env=env, stdout=RAW_INSPECT)
    # 0 ok, 1 degraded, 2 critical, 4 nothing to judge: each an answer; 3 is agentd failing
    run.run("agentd-check", [*py, "check", *cfg, "--format", "json"], timeout=60, env=env, stdout=RAW_CHECK, ok_codes=(0, 1, 2, 4))
    capture = run.scratch / CAPTURE
    step = run.run("agentd-capture", [*py, "capture", *cfg, "--redact", "--out", str(capture)], timeout=90, env=env)
    if step.ok and capture.is_file():
        size = capture.stat().st_size
        if size <= OUT_FILE_MAX:
            shutil.copyfile(capture, run.out / CAPTURE)
        else:
            step.reason = f"capture is {size} bytes, over the {OUT_FILE_MAX} the device tool brings back: kept in scratch only"
    render_dir = run.scratch / "render"
    step = run.run("agentd-render", [*py, "render", *cfg, "--out-dir", str(render_dir)], timeout=60, env=env)
    topo = render_dir / "nccl-topo.xml"
    for src, raw in ((topo, RAW_TOPO), (render_dir / "nccl.env", RAW_NCCL_ENV)):
        if src.is_file():
            shutil.copyfile(src, run.raw / raw)
            step.outputs.append(raw)
    run.flush()
    if topo.is_file():
        run.meta["topo_source"] = "agentd render"
        return topo
    # render wrote nothing (its validation refused the files, or it failed): NCCL's verdict
    # on the XML agentd renders is wanted all the same
    raw = run.run("agentd-topo-raw", [opts.python, str(HERE / "render_topo.py"), *cfg], timeout=60, env=env, stdout=RAW_TOPO)
    if raw.ok and (run.raw / RAW_TOPO).stat().st_size > 0:
        run.meta["topo_source"] = "tests/gpu/render_topo.py (agentd render wrote none)"
        return run.raw / RAW_TOPO
    (run.raw / RAW_TOPO).unlink(missing_ok=True)
    return None


def nccl_steps(run: Run, opts: Options, env: dict[str, str], topo: Path | None) -> str | None:
    """NCCL initialised twice on one rank: its own view (a.xml), then with agentd's XML as
    NCCL_TOPO_FILE (b.xml). A first run that fails to bootstrap is tried once more on the
    loopback interface; the NCCL_SOCKET_IFNAME that worked (None: the default) is returned
    for the benchmark."""
    script = str(HERE / "nccl_init.py")
    ifname: str | None = None

    def once(name: str, dump: str, log: str, result: str, topo_file: Path | None, socket_ifname: str | None) -> Step:
        e = nccl_env(env, dump=run.raw / dump, log=run.raw / log, topo_file=topo_file, socket_ifname=socket_ifname)
        return run.run(name, [opts.python, script], timeout=90, env=e, stdout=result, outputs=[dump, log])

    a = once("nccl-a", RAW_NCCL_A, RAW_NCCL_A_LOG, RAW_NCCL_A_JSON, None, None)
    if not a.ok and a.status != "skipped" and "bootstrap" in (a.stderr_tail + _read(run.raw / RAW_NCCL_A_LOG)).lower():
        ifname = "lo"
        if (run.raw / RAW_NCCL_A_LOG).exists():  # the first try's log is kept: it says why
            os.replace(run.raw / RAW_NCCL_A_LOG, run.raw / RAW_NCCL_A_FIRST_LOG)
        a = once("nccl-a-lo", RAW_NCCL_A, RAW_NCCL_A_LOG, RAW_NCCL_A_JSON, None, ifname)
        if not a.ok:
            ifname = None
    if topo is None:
        run.skip("nccl-b", "agentd wrote no topology XML (see agentd-render)")
    else:
        once("nccl-b", RAW_NCCL_B, RAW_NCCL_B_LOG, RAW_NCCL_B_JSON, topo, ifname)
    return ifname


def bench_steps(run: Run, opts: Options, env: dict[str, str], config: Path, gpus: int, socket_ifname: str | None) -> None:
    e = dict(env)
    if socket_ifname is not None:
        e["NCCL_SOCKET_IFNAME"] = socket_ifname
    argv = [opts.python, "-m", "agentd", "bench", "nccl", "--config", str(config), "--runner", "torch", "--format", "json",
            "--ops", BENCH_OPS, "--sizes", BENCH_SIZES, "--time-limit", str(BENCH_TIME_LIMIT_S)]  # fmt: skip
    if gpus > 0:
        argv += ["--gpus", str(gpus)]
    run.meta["bench"] = {"ops": BENCH_OPS.split(","), "sizes": BENCH_SIZES.split(","), "gpus": gpus}
    # 0 every result at its minimum, 1 one below: both measured
    step = _explained(run, run.run("bench", argv, timeout=BENCH_TIME_LIMIT_S + 30, env=e, stdout=RAW_BENCH, ok_codes=(0, 1)))
    if step.rc == 3 and bench_status(_read(run.raw / RAW_BENCH)) == "refused":
        # refused: something held a GPU (or that could not be checked); kept, then measured anyway
        os.replace(run.raw / RAW_BENCH, run.raw / RAW_BENCH_REFUSED)
        _explained(run, run.run("bench-forced", [*argv, "--force"], timeout=BENCH_TIME_LIMIT_S + 30, env=e, stdout=RAW_BENCH, ok_codes=(0, 1)))


def _explained(run: Run, step: Step) -> Step:
    """A failed benchmark step's reason from its JSON answer (it writes no stderr)."""
    status, reason = bench_answer(_read(run.raw / RAW_BENCH))
    if not step.ok and status is not None and not step.stderr_tail.strip():
        step.reason = f"exit status {step.rc}: {status}" + (f": {reason}" if reason else "")
        run.flush()
    return step


class Daemon:
    """`agentd run` on the live root with the scratch configuration, on a free port."""

    def __init__(self, run: Run, opts: Options, env: dict[str, str], config: Path):
        self.run, self.opts, self.env, self.config = run, opts, env, config
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.started = 0.0
        self.log = run.raw / RAW_DAEMON_LOG

    def start(self) -> None:
        self.port = free_port()
        argv = [self.opts.python, "-m", "agentd", "run", "--config", str(self.config), "--listen", f"127.0.0.1:{self.port}"]
        step = Step("daemon-start", "ok", argv=argv)
        try:
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                             start_new_session=True, cwd=REPO)  # fmt: skip
        except OSError as e:
            step.status, step.reason = "error", f"could not start: {e}"
        self.started = self.run.clock()
        self.run.meta["daemon"] = {"port": self.port, "wait_s": self.opts.daemon_wait_s, "pid": self.proc.pid if self.proc else None}
        self.run.record(step)

    def scrape(self) -> None:
        """Wait until the daemon has run daemon_wait_s, then read /metrics and /health."""
        if self.proc is None:
            self.run.skip("daemon-scrape", "the daemon did not start")
            return
        wait = self.started + self.opts.daemon_wait_s - self.run.clock()
        wait = min(wait, self.run.left() - 15)
        while wait > 0 and self.proc.poll() is None:
            time.sleep(min(wait, 1.0))
            wait -= 1.0
        if self.proc.poll() is not None:
            self.run.record(Step("daemon-scrape", "failed", rc=self.proc.returncode,
                                 reason=f"the daemon exited ({self.proc.returncode}) before its scrape: {_last_line(_tail(self.log))}"))  # fmt: skip
            return
        ran = self.run.clock() - self.started
        problems = []
        for path, raw in (("/metrics", RAW_METRICS), ("/health", RAW_HEALTH)):
            status, body, err = http_get(f"http://127.0.0.1:{self.port}{path}", timeout=10)
            (self.run.raw / raw).write_bytes(body)
            self.run.meta.setdefault("http", {})[path] = {"status": status, "error": err, "after_s": round(ran, 1)}  # type: ignore[union-attr]
            # /health answers 503 on a critical node: an answer all the same
            if status is None:
                problems.append(f"{path}: {err}")
        step = Step("daemon-scrape", "ok" if not problems else "failed", seconds=round(ran, 1), reason="; ".join(problems),
                    outputs=[RAW_METRICS, RAW_HEALTH])  # fmt: skip
        self.run.record(step)

    def stop(self) -> None:
        if self.proc is None:
            return
        start = self.run.clock()
        rc = self.proc.poll()
        stopped = rc is None
        if stopped:
            rc = stop_session(self.proc, grace=15.0)
        step = Step("daemon-stop", "ok" if rc == 0 else "failed", rc=rc, seconds=round(self.run.clock() - start, 2),
                    reason="" if rc == 0 else f"exit status {rc} ({'after SIGTERM' if stopped else 'it had exited by itself'})",
                    stderr_tail=_tail(self.log), outputs=[RAW_DAEMON_LOG])  # fmt: skip
        self.run.record(step)


def http_get(url: str, timeout: float) -> tuple[int | None, bytes, str]:
    """(HTTP status, body, error): an HTTP error status is an answer; no answer is (None, b"", why)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read(OUT_FILE_MAX), ""
    except urllib.error.HTTPError as e:
        return e.code, e.read(OUT_FILE_MAX), ""
    except (OSError, ValueError) as e:
        return None, b"", str(e)


def bench_answer(text: str) -> tuple[str | None, str]:
    """(status, reason) of `agentd bench nccl --format json`'s run; (None, "") when it is not there."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None, ""
    run = doc.get("run") if isinstance(doc, dict) else None
    status = run.get("status") if isinstance(run, dict) else None
    reason = run.get("reason") if isinstance(run, dict) else None
    return (status if isinstance(status, str) else None), (reason if isinstance(reason, str) else "")


def bench_status(text: str) -> str | None:
    """The status of `agentd bench nccl --format json`'s run, None when it is not there."""
    return bench_answer(text)[0]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def main(argv: Sequence[str] | None = None, *, probe: Callable[[], GpuProbe] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "gpu-check-out", help="output folder (default gpu-check-out/)")
    ap.add_argument("--scratch", type=Path, help="scratch folder (default: a new one in the temporary directory)")
    ap.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="wheels of agentd's dependencies (make gpu-wheels)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds for the whole run (default {BUDGET_S:g})")
    ap.add_argument("--daemon-wait", type=float, default=DAEMON_WAIT_S, help=f"seconds the daemon runs before its scrape (default {DAEMON_WAIT_S:g})")
    ap.add_argument("--force", action="store_true", help="run every step even without a GPU")
    ap.add_argument("--skip", default="", help=f"comma-separated step groups to leave out ({', '.join(STEP_GROUPS)})")
    ap.add_argument("--keep-scratch", action="store_true", help="leave the scratch folder (it is removed otherwise)")
    args = ap.parse_args(argv)
    skip = frozenset(s for s in args.skip.split(",") if s)
    unknown = skip - set(STEP_GROUPS)
    if unknown:
        ap.error(f"--skip: unknown step groups {', '.join(sorted(unknown))}")
    found = probe() if probe is not None else probe_gpu(smi=find_smi())
    if not found.present and not args.force:
        print(f"no GPU: skipped ({found.how})")
        return 0
    opts = Options(out=args.out, scratch=args.scratch, wheels=args.wheels, budget_s=args.budget,
                   daemon_wait_s=args.daemon_wait, force=args.force, keep_scratch=args.keep_scratch, skip=skip)  # fmt: skip
    return execute(opts, found)


def _stop_on_signal(signum: int, frame: object) -> None:
    """SIGTERM (a device tool or a scheduler ending the run) ends it like an error: the
    daemon is stopped and the summary and bundle are written on the way out."""
    raise SystemExit(128 + signum)


def execute(opts: Options, found: GpuProbe) -> int:
    previous = signal.signal(signal.SIGTERM, _stop_on_signal)
    scratch = opts.scratch or Path(tempfile.mkdtemp(prefix="agentd-gpu-check-"))
    run = Run(opts.out, scratch, opts.budget_s)
    run.meta["gpu"] = asdict(found)
    run.meta["scratch"] = str(scratch)
    run.meta["skip"] = sorted(opts.skip)
    print(f"gpu-check: {found.how}; output {opts.out}, scratch {scratch}, budget {opts.budget_s:.0f} s", flush=True)
    daemon: Daemon | None = None
    try:
        env = setup_agentd(run, opts)
        cli_config = scratch / "cli.toml"
        cli_config.write_text(config_toml(scratch / "cli"))
        daemon_config = scratch / "daemon.toml"
        daemon_config.write_text(config_toml(scratch / "daemon"))
        if env is not None and "daemon" not in opts.skip:
            daemon = Daemon(run, opts, env, daemon_config)
            daemon.start()  # first, so that its two minutes pass while the rest runs
        if "smi" not in opts.skip:
            smi_steps(run, found)
        topo = None
        if env is None:
            run.skip("agentd", "agentd does not start (see setup-agentd): no agentd step ran")
        elif "agentd" not in opts.skip:
            topo = agentd_steps(run, opts, env, cli_config)
        ifname = None
        if "nccl" not in opts.skip:
            ifname = nccl_steps(run, opts, env or agentd_env(os.environ, None), topo)
        if env is not None and "bench" not in opts.skip:
            bench_steps(run, opts, env, cli_config, found.count, ifname)
        if daemon is not None:
            daemon.scrape()
    except Exception as e:  # the run itself broke: say where, keep what it has
        run.record(Step("gpu-check", "error", reason=f"{type(e).__name__}: {e}"))
    except SystemExit as e:  # SIGTERM: record it, clean up below, then exit as asked
        run.record(Step("gpu-check", "error", reason=f"stopped by a signal (exit {e.code})"))
        raise
    finally:
        if daemon is not None:
            daemon.stop()
        run.meta["finished_at"] = time.time()
        run.flush()
        if not opts.keep_scratch and opts.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    bad = [s.name for s in run.steps if s.status in ("failed", "timeout", "error")]
    print(f"gpu-check: {len(run.steps)} steps in {run.elapsed():.0f} s, {len(bad)} failed"
          + (f" ({', '.join(bad)})" if bad else "") + f"; {opts.out / SUMMARY}", flush=True)  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
