"""`make gpu-check` (tests/gpu/gpu_check.py) where CI runs it, without a GPU: the skip
path, and every part of the device run that does not need one (bounded steps, the record
of what failed, the bundle, the scratch configuration, the offline install, the NCCL
environment); the forced run goes through every step on this machine, the daemon's too."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from agentd.config import Paths, load_config, path_clashes
from tests.gpu import compare as cmp
from tests.gpu import gpu_check as gc
from tests.support.paths import FIXTURES, REPO

SCRIPT = REPO / "tests" / "gpu" / "gpu_check.py"


def no_gpu() -> gc.GpuProbe:
    return gc.GpuProbe(False, 0, "no nvidia-smi, and /proc/driver/nvidia/gpus lists none", None)


def this_machine_has_a_gpu() -> bool:
    return gc.probe_gpu(smi=gc.find_smi()).present


def test_without_a_gpu_it_says_skipped_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert gc.main(["--out", str(out)], probe=no_gpu) == 0
    assert capsys.readouterr().out == "no GPU: skipped (no nvidia-smi, and /proc/driver/nvidia/gpus lists none)\n"
    assert not out.exists()


@pytest.mark.proc
def test_make_gpu_check_skips_where_ci_runs_it(tmp_path):
    if this_machine_has_a_gpu():
        pytest.skip("this machine has an NVIDIA GPU: make gpu-check would run for real")
    p = subprocess.run(["make", "-s", "--no-print-directory", "gpu-check", f"GPU_CHECK_OUT={tmp_path / 'out'}"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("no GPU: skipped (") and not (tmp_path / "out").exists()


def test_gpu_probe_asks_nvidia_smi_then_the_driver(tmp_path):
    listing = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-8a7e2c83-1c3f-4f02-8d1e-6f6e1c0f2b11)\n"
    found = gc.probe_gpu(smi="/usr/bin/nvidia-smi", proc_gpus=tmp_path / "none", run=lambda argv, t: (0, listing))
    assert (found.present, found.count, found.how, found.listing) == (True, 1, "nvidia-smi -L", listing)
    # nvidia-smi failing (a driver/library mismatch exits 18): the driver's own list decides
    (tmp_path / "gpus" / "0000:1b:00.0").mkdir(parents=True)
    failing = gc.probe_gpu(smi="/usr/bin/nvidia-smi", proc_gpus=tmp_path / "gpus", run=lambda argv, t: (18, "Failed to initialize NVML\n"))
    assert (failing.present, failing.count) == (True, 1)
    none = gc.probe_gpu(smi=None, proc_gpus=tmp_path / "none")
    assert not none.present and none.how == f"no nvidia-smi, and {tmp_path / 'none'} lists none"


def test_the_configuration_writes_nothing_outside_the_scratch_folder(tmp_path):
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(gc.config_toml(tmp_path / "scratch"))
    paths = load_config(cfg).paths
    for key in Paths.model_fields:
        value = getattr(paths, key)
        if value is not None:
            assert value.is_relative_to(tmp_path / "scratch"), key
    assert path_clashes(paths) == []


def test_the_environments_of_agentd_and_nccl():
    base = {"PATH": "/usr/bin", "AGENTD_LISTEN": "0.0.0.0:1", "PYTHONPATH": "/opt/x", "NCCL_TOPO_FILE": "/etc/nccl/topo.xml",
            "NCCL_DEBUG_SUBSYS": "ALL", "NCCL_IB_HCA": "mlx5_0"}  # fmt: skip
    env = gc.agentd_env(base, Path("/scratch/site"))
    assert "AGENTD_LISTEN" not in env and env["PYTHONPATH"] == os.pathsep.join([str(REPO), "/scratch/site", "/opt/x"])
    a = gc.nccl_env(base, dump=Path("/r/a.xml"), log=Path("/r/a.log"), topo_file=None, socket_ifname=None)
    assert "NCCL_TOPO_FILE" not in a and a["NCCL_TOPO_DUMP_FILE"] == "/r/a.xml" and a["NCCL_DEBUG_FILE"] == "/r/a.log"
    assert (a["NCCL_DEBUG"], a["NCCL_DEBUG_SUBSYS"], a["NCCL_IB_HCA"]) == ("INFO", "INIT,ENV,GRAPH", "mlx5_0")
    b = gc.nccl_env(base, dump=Path("/r/b.xml"), log=Path("/r/b.log"), topo_file=Path("/s/render/nccl-topo.xml"), socket_ifname="lo")
    assert (b["NCCL_TOPO_FILE"], b["NCCL_SOCKET_IFNAME"]) == ("/s/render/nccl-topo.xml", "lo")


def make_wheel(directory: Path, name: str, version: str, module: str, body: str) -> Path:
    """A pure-Python wheel made by hand (PEP 427: the module, METADATA, WHEEL and a RECORD
    with each file's hash), so pip has something to install without a network."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{module}.py": body.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}" for path, data in files.items()]
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, data in files.items():
            z.writestr(p, data)
    return path


@pytest.mark.proc
def test_wheels_install_offline_and_come_first(tmp_path):
    """What the device run does with the carried wheels: pip, no index, into the scratch
    folder; the packages there are found before the interpreter's own (the locked versions
    win over the image's) and the repository before both."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "gpu_check_probe", "1.0", "gpu_check_probe", "WHO = 'the carried wheel'\n")
    make_wheel(wheels, "psutil", "0.0.1", "psutil", "version_info = (0, 0, 1)\n")  # shadows the installed one
    site = tmp_path / "site"
    argv = gc.pip_install_argv(sys.executable, sorted(wheels.glob("*.whl")), site)
    assert {"--no-index", "--no-deps", "--target"} <= set(argv)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, "PIP_NO_INDEX": "1"})
    assert p.returncode == 0, p.stderr
    env = gc.agentd_env(os.environ, site)
    code = "import gpu_check_probe, psutil, agentd, sys; print(gpu_check_probe.WHO, psutil.version_info, agentd.__file__)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"the carried wheel (0, 0, 1) {REPO / 'agentd' / '__init__.py'}"


def test_step_records_of_a_run_with_no_time_left(tmp_path):
    run = gc.Run(tmp_path / "out", tmp_path / "scratch", budget_s=10)
    step = run.run("late", [sys.executable, "-c", "pass"], timeout=60)
    assert (step.status, step.reason) == ("skipped", "no time left in the 10 s budget")
    summary = json.loads((tmp_path / "out" / gc.SUMMARY).read_text())
    assert summary["skipped"] == {"late": "no time left in the 10 s budget"} and summary["files"] == [gc.BUNDLE, gc.SUMMARY]


def ended(pid: int, wait_s: float = 5.0) -> bool:
    """The process has exited: gone, or a zombie its new parent has not reaped yet."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.mark.proc
def test_steps_are_bounded_and_a_failure_is_recorded_and_the_rest_goes_on(tmp_path):
    run = gc.Run(tmp_path / "out", tmp_path / "scratch", budget_s=600)
    py = sys.executable
    ok = run.run("ok", [py, "-c", "print('hello')"], timeout=30, stdout="hello.txt")
    failed = run.run("failed", [py, "-c", "import sys; sys.stderr.write('first\\nthe reason\\n'); sys.exit(3)"], timeout=30)
    pidfile = tmp_path / "pids"
    # a process that leaves a child behind, both past the step's time: the session goes
    hung = run.run("hung", ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; echo $$ >> {pidfile}; wait"], timeout=1.5)
    missing = run.run("missing", [str(tmp_path / "no-such-tool")], timeout=30)
    assert (ok.status, ok.rc, ok.outputs) == ("ok", 0, ["hello.txt"])
    assert (failed.status, failed.rc, failed.reason) == ("failed", 3, "exit status 3: the reason")
    assert hung.status == "timeout" and hung.reason.startswith("still running after 2 s")
    assert all(ended(int(pid)) for pid in pidfile.read_text().split())
    assert missing.status == "error" and missing.reason.startswith("could not start: [Errno 2]")
    summary = json.loads((tmp_path / "out" / gc.SUMMARY).read_text())
    assert [s["name"] for s in summary["steps"]] == ["ok", "failed", "hung", "missing"]
    assert set(summary["failed"]) == {"failed", "hung", "missing"}
    with tarfile.open(tmp_path / "out" / gc.BUNDLE) as tar:
        assert sorted(tar.getnames()) == ["failed.stderr", "hello.txt", "hung.stderr", "missing.stderr", "ok.stderr"]
        assert tar.extractfile("hello.txt").read() == b"hello\n"


def test_the_bundle_cuts_a_file_too_large_to_come_back(tmp_path, monkeypatch):
    monkeypatch.setattr(gc, "MEMBER_MAX", 10)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "small.txt").write_text("0123456789")
    (raw / "daemon.log").write_text("x" * 100)
    gc.write_bundle(raw, tmp_path / "b.tar.gz")
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        assert {m.name: m.size for m in tar.getmembers()} == {"daemon.log.truncated": 10, "small.txt": 10}


def test_bench_status_reads_the_runs_answer():
    assert gc.bench_status(json.dumps({"run": {"status": "refused", "reason": "GPUs busy"}})) == "refused"
    assert gc.bench_status("agentd: error\n") is None and gc.bench_status("[]") is None


def fake_nvidia_smi(directory: Path) -> Path:
    """An nvidia-smi that answers with real published outputs (tests/fixtures/SOURCES.md):
    telegraf's A100 for -q -x, gpud's H100 for -q, an A100 node's nvlink -s, whose first
    line (the GPU, its name and UUID) is also what -L prints, a workstation's topo -m."""
    out = FIXTURES / "outputs"
    nvlink = out / "nvidia-smi-nvlink-status.a100-8gpu.txt"
    script = f"""#!/bin/sh
case "$*" in
  "-L") head -n 1 {nvlink} ;;
  "-q -x") cat {FIXTURES / "nvidia-smi-xml" / "telegraf-a100-sxm4-v12.xml"} ;;
  "-q") cat {out / "nvidia-smi-q.h100-sxm-8gpu.535.161.08.txt"} ;;
  "topo -m") cat {out / "nvidia-smi-topo-m.puget-wrx90-2gpu-2nic-pcie.txt"} ;;
  "nvlink -s") cat {nvlink} ;;
  *) exit 2 ;;
esac
"""
    directory.mkdir(parents=True, exist_ok=True)
    smi = directory / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(0o755)
    return smi


def run_script(tmp_path: Path, *args: str, path_prefix: Path | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.Popen([sys.executable, str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_on_this_machine_records_every_step_and_compares(tmp_path):
    """Every step on this machine, its nvidia-smi a stand-in answering with real outputs (no
    GPU, no torch, no NCCL): the NCCL and bench steps fail and say why, agentd runs on the
    live root with every path in scratch, the daemon is read and stopped, and the folder
    compares (nvidia-smi's A100 against agentd's reads of this machine, the capture judged
    as the live check judged it)."""
    if this_machine_has_a_gpu():
        pytest.skip("this machine has an NVIDIA GPU: the run would measure it")
    out, scratch, empty = tmp_path / "out", tmp_path / "scratch", tmp_path / "no-wheels"
    empty.mkdir()
    p = run_script(tmp_path, "--out", str(out), "--scratch", str(scratch), "--wheels", str(empty), "--budget", "150", "--daemon-wait", "3",
                   path_prefix=fake_nvidia_smi(tmp_path / "bin").parent)  # fmt: skip
    console, _ = p.communicate(timeout=240)
    assert p.returncode == 1, console  # the NCCL and bench steps failed
    assert "no GPU: skipped" not in console
    summary = json.loads((out / gc.SUMMARY).read_text())
    assert (summary["gpu"]["present"], summary["gpu"]["count"], summary["gpu"]["how"]) == (True, 1, "nvidia-smi -L")
    status = {s["name"]: s["status"] for s in summary["steps"]}
    assert status["setup-wheels"] == "skipped" and status["setup-agentd"] == "ok"
    assert [status[n] for n in ("smi-q-x", "smi-q", "smi-topo-m", "smi-nvlink-s", "smi-q-pcie")] == ["ok", "ok", "ok", "ok", "failed"]
    assert status["agentd-inspect"] == status["agentd-check"] == status["agentd-capture"] == "ok"
    assert status["nccl-a"] == "failed" and status["bench"] == "failed"
    # no GPU here: agentd renders no topology, and its fallback says why
    assert status["agentd-render"] == status["agentd-topo-raw"] == "failed" and status["nccl-b"] == "skipped"
    assert summary["failed"]["agentd-topo-raw"] == "exit status 1: no topology XML: the node has no GPUs"
    assert status["daemon-start"] == status["daemon-scrape"] == status["daemon-stop"] == "ok"
    assert summary["http"]["/health"]["status"] in (200, 503) and summary["files"] == [gc.BUNDLE, gc.CAPTURE, gc.SUMMARY]
    # nothing of the run outside its scratch folder: the configuration it ran with
    for name in ("cli.toml", "daemon.toml"):
        for key, value in load_config(scratch / name).paths.model_dump().items():
            assert value is None or Path(value).is_relative_to(scratch), (name, key)
    rows = cmp.compare_dir(out)
    got = {(r.section, r.subject, r.field): r for r in rows}
    assert got[("check", "replay", "status")].outcome == got[("check", "replay", "findings")].outcome == "match"
    assert got[("daemon", "/metrics", "parse")].outcome == got[("daemon", "/health", "status")].outcome == "match"
    assert dict(got[("nvml", "node", "driver_version")].values)["nvidia-smi"] == "535.54.03"
    assert got[("nvml", "gpu0", "present")].outcome == "missing"  # this machine's agentd reads no NVML GPU
    assert got[("steps", "smi-q-pcie", "status")].outcome == "missing"


@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_stops_the_daemon_and_keeps_the_summary(tmp_path):
    out, empty = tmp_path / "out", tmp_path / "no-wheels"
    empty.mkdir()
    p = run_script(tmp_path, "--force", "--out", str(out), "--wheels", str(empty), "--daemon-wait", "100", "--skip", "smi,agentd,nccl,bench")
    deadline = time.monotonic() + 60
    steps: list[dict] = []
    while time.monotonic() < deadline and not any(s["name"] == "daemon-start" for s in steps):
        time.sleep(0.2)
        try:
            steps = json.loads((out / gc.SUMMARY).read_text())["steps"]
        except (OSError, ValueError):
            pass
    time.sleep(1)
    p.send_signal(signal.SIGTERM)
    console, _ = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, console
    summary = json.loads((out / gc.SUMMARY).read_text())
    status = {s["name"]: (s["status"], s["reason"]) for s in summary["steps"]}
    assert status["gpu-check"] == ("error", f"stopped by a signal (exit {128 + signal.SIGTERM})")
    assert status["daemon-stop"][0] == "ok"
    assert ended(summary["daemon"]["pid"])
