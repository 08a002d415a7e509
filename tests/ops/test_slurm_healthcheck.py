"""The Slurm HealthCheckProgram wrapper, run by a POSIX shell against fake curl, agentd and
scontrol commands that record how they were called.

Hermetic: PATH is one temporary directory holding the fakes and links to exactly the
system tools the script and the fakes use. The script itself appends the usual system
directories to PATH (slurmd may start it with a minimal one), so the "no curl" case also
hides any curl installed there, inside a private mount namespace.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.proc]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "slurm" / "agentd-healthcheck"
SHELL = shutil.which("dash") or "/bin/sh"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the script and the fake commands run besides shell builtins and the fakes.
TOOLS = ("cat", "cut", "find", "grep", "head", "hostname", "id", "sed", "sleep", "tail", "timeout", "tr", "uname")

CRITICAL = (
    "critical\n"
    'critical ib.port.down mlx5_3:1: port state DOWN (expected ACTIVE); "check cable"\n'
    "critical gdr.unavailable node: nvidia_peermem not loaded\n"
    "warning mtu.mismatch eth2: MTU 1500, expected 9000\n"
)
DRAINED_BY_AGENTD = "NodeName=gpu01 Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=2\n   Reason=agentd: ib.port.down mlx5_3:1: port state DOWN [root@2024-05-01T10:00:00]\n"
DRAINED_BY_ADMIN = "NodeName=gpu01 Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=2\n   Reason=bad DIMM [alice@2024-05-01T10:00:00]\n"
IDLE = "NodeName=gpu01 Arch=x86_64\n   State=IDLE ThreadsPerCore=2\n"

FAKE_CURL = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_LOG/curl"
[ -n "${FAKE_CURL_SLEEP:-}" ] && exec sleep "$FAKE_CURL_SLEEP"
[ "${FAKE_CURL_RC:-0}" = 0 ] || { echo "curl: (7) Failed to connect" >&2; exit "$FAKE_CURL_RC"; }
printf '%s\\n%s' "$FAKE_CURL_BODY" "$FAKE_CURL_CODE"
"""
FAKE_AGENTD = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_LOG/agentd"
# agentd takes every AGENTD_* variable as configuration and refuses one it does not know
if env | grep -q '^AGENTD_'; then env | grep '^AGENTD_' >> "$FAKE_LOG/agentd_env"; exit 3; fi
printf '%s' "${FAKE_CHECK_BODY:-}"
exit "${FAKE_CHECK_RC:-3}"
"""
FAKE_SCONTROL = """#!/bin/sh
if [ "$1" = show ]; then printf '%s' "${FAKE_SHOW:-}"; exit 0; fi
for a in "$@"; do printf '%s\\n' "$a"; done > "$FAKE_LOG/update.$$"
cat "$FAKE_LOG/update.$$" >> "$FAKE_LOG/updates"; echo "--" >> "$FAKE_LOG/updates"
"""
FAKE_LOGGER = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_LOG/logger"
"""


@dataclass
class Result:
    rc: int
    updates: list[list[str]]
    curl_calls: list[str]
    agentd_calls: list[str]
    log: str


def script_system_dirs() -> list[str]:
    """The directories the script appends to the caller's PATH."""
    m = re.search(r'^PATH="\$\{PATH:\+\$PATH:\}([^"$]+)"$', SCRIPT.read_text(), re.M)
    assert m, "the script no longer extends PATH the way this test expects"
    return m.group(1).split(":")


def system_curls() -> list[str]:
    """Every curl the script could find through the directories it appends (real paths)."""
    return sorted({os.path.realpath(c) for d in script_system_dirs() if os.access(c := os.path.join(d, "curl"), os.X_OK)})


def private_mounts() -> list[str] | None:
    """An ``unshare`` prefix giving a private mount namespace, or None where there is none."""
    unshare = shutil.which("unshare", path=SYSTEM_PATH)
    if unshare is None:
        return None
    cmd = [unshare, "--mount", "--propagation", "private"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    ok = subprocess.run([*cmd, "true"], capture_output=True, timeout=30).returncode == 0
    return cmd if ok else None


@pytest.fixture
def run(tmp_path: Path):
    bindir = tmp_path / "bin"
    logdir = tmp_path / "log"
    bindir.mkdir()
    logdir.mkdir()
    for name, text in (("curl", FAKE_CURL), ("agentd", FAKE_AGENTD), ("scontrol", FAKE_SCONTROL), ("logger", FAKE_LOGGER)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    for tool in TOOLS:
        if (real := shutil.which(tool, path=SYSTEM_PATH)) is not None:
            (bindir / tool).symlink_to(real)

    def _run(*, body: str = "", code: int = 200, curl_rc: int = 0, check_body: str = "", check_rc: int = 3, show: str = IDLE,
             wrap: tuple[str, ...] = (), **env: str) -> Result:
        environ = {
            "PATH": str(bindir),
            "FAKE_LOG": str(logdir),
            "FAKE_CURL_BODY": body,
            "FAKE_CURL_CODE": str(code),
            "FAKE_CURL_RC": str(curl_rc),
            "FAKE_CHECK_BODY": check_body,
            "FAKE_CHECK_RC": str(check_rc),
            "FAKE_SHOW": show,
            "AGENTD_NODENAME": "gpu01",
            # never the host's /etc/agentd/slurm-healthcheck.conf; tests write this one
            "AGENTD_SLURM_CONF": str(tmp_path / "slurm-healthcheck.conf"),
            **env,
        }
        for f in logdir.iterdir():
            f.unlink()
        proc = subprocess.run([*wrap, SHELL, str(SCRIPT)], env=environ, capture_output=True, text=True, timeout=120)
        raw = (logdir / "updates").read_text() if (logdir / "updates").exists() else ""
        updates = [block.strip("\n").split("\n") for block in raw.split("--\n") if block.strip()]
        read = lambda n: (logdir / n).read_text().splitlines() if (logdir / n).exists() else []  # noqa: E731
        return Result(proc.returncode, updates, read("curl"), read("agentd"), proc.stderr)

    return _run


def test_script_is_executable_posix_sh() -> None:
    assert SCRIPT.read_text().startswith("#!/bin/sh\n")
    assert os.access(SCRIPT, os.X_OK)
    subprocess.run([SHELL, "-n", str(SCRIPT)], check=True)


def test_critical_drains_with_first_critical_finding(run) -> None:
    r = run(body=CRITICAL, code=503)
    assert r.rc == 2
    assert r.updates == [["update", "NodeName=gpu01", "State=DRAIN", "Reason=agentd: ib.port.down mlx5_3:1: port state DOWN (expected ACTIVE); check cable (+1 more)"]]
    assert "/health?format=text" in r.curl_calls[0] and "--max-time" in r.curl_calls[0]
    assert r.agentd_calls == []  # the daemon answered: no one-shot collection


def test_reason_is_truncated_and_keeps_the_count(run) -> None:
    body = "critical\ncritical pcie.link.downtrained 0000:1b:00.0: " + "x" * 500 + "\ncritical ib.port.down mlx5_0:1: down\n"
    r = run(body=body, code=503, AGENTD_REASON_MAX="80")
    reason = r.updates[0][3]
    assert reason.startswith("Reason=agentd: pcie.link.downtrained 0000:1b:00.0: xxx")
    assert reason.endswith("x (+1 more)")
    assert len(reason) - len("Reason=") <= 80


def test_ok_resumes_a_node_agentd_drained(run) -> None:
    r = run(body="ok\n", code=200, show=DRAINED_BY_AGENTD)
    assert r.rc == 0
    assert r.updates == [["update", "NodeName=gpu01", "State=RESUME"]]


def test_degraded_also_resumes_agentd_drain(run) -> None:
    r = run(body="degraded\nwarning mtu.mismatch eth2: MTU 1500\n", code=200, show=DRAINED_BY_AGENTD)
    assert r.rc == 1
    assert r.updates == [["update", "NodeName=gpu01", "State=RESUME"]]


def test_info_lines_never_drain_and_never_keep_a_drain(run) -> None:
    """Info findings (an application's XID) are listed, shown as data: never a reason."""
    info = "info gpu.xid gpu0: XID 13 (Graphics Engine Exception) x3 in the kernel log\n"
    r = run(body="ok\n" + info, code=200, show=DRAINED_BY_AGENTD)
    assert r.rc == 0 and r.updates == [["update", "NodeName=gpu01", "State=RESUME"]]
    r = run(body="critical\ncritical ib.port.down mlx5_3:1: port state DOWN\n" + info, code=503, show=IDLE)
    assert r.updates == [["update", "NodeName=gpu01", "State=DRAIN", "Reason=agentd: ib.port.down mlx5_3:1: port state DOWN"]]


def test_ok_never_resumes_someone_elses_drain(run) -> None:
    r = run(body="ok\n", code=200, show=DRAINED_BY_ADMIN)
    assert r.rc == 0 and r.updates == []


def test_critical_leaves_an_admin_drain_and_its_reason_alone(run) -> None:
    r = run(body=CRITICAL, code=503, show=DRAINED_BY_ADMIN)
    assert r.rc == 2 and r.updates == []
    assert "left alone" in r.log


def test_same_agentd_drain_is_not_repeated(run) -> None:
    body = "critical\ncritical ib.port.down mlx5_3:1: port state DOWN\n"
    r = run(body=body, code=503, show=DRAINED_BY_AGENTD)
    assert r.rc == 2 and r.updates == []
    # A different critical finding updates agentd's own reason.
    r = run(body="critical\ncritical nvlink.link.down gpu3: link 4 down\n", code=503, show=DRAINED_BY_AGENTD)
    assert r.updates == [["update", "NodeName=gpu01", "State=DRAIN", "Reason=agentd: nvlink.link.down gpu3: link 4 down"]]


def test_ok_on_a_healthy_node_changes_nothing(run) -> None:
    r = run(body="ok\n", code=200, show=IDLE)
    assert r.rc == 0 and r.updates == []


def test_daemon_down_falls_back_to_agentd_check(run) -> None:
    r = run(curl_rc=7, check_body="critical\ncritical inventory.gpu.missing gpu7: 7 of 8 GPUs\n", check_rc=2)
    assert r.agentd_calls == ["check --format text"]
    assert r.rc == 2
    assert r.updates == [["update", "NodeName=gpu01", "State=DRAIN", "Reason=agentd: inventory.gpu.missing gpu7: 7 of 8 GPUs"]]


def test_the_scripts_own_settings_never_reach_agentd_check(run, tmp_path: Path) -> None:
    """AGENTD_URL, AGENTD_BIN, AGENTD_NODENAME, AGENTD_REASON_MAX and AGENTD_SLURM_CONF are
    the script's (its header); agentd would read them as config keys and refuse them."""
    r = run(curl_rc=7, check_body="ok\n", check_rc=0, show=DRAINED_BY_AGENTD, AGENTD_URL="http://127.0.0.1:9",
            AGENTD_BIN="agentd", AGENTD_REASON_MAX="100")
    assert not (tmp_path / "log" / "agentd_env").exists()
    assert r.agentd_calls == ["check --format text"]
    assert r.rc == 0 and r.updates == [["update", "NodeName=gpu01", "State=RESUME"]]


def test_stale_daemon_data_falls_back_to_agentd_check(run) -> None:
    r = run(body="stale\n", code=503, check_body="ok\n", check_rc=0, show=DRAINED_BY_AGENTD)
    assert r.agentd_calls == ["check --format text"]
    assert r.rc == 0 and r.updates == [["update", "NodeName=gpu01", "State=RESUME"]]


def test_unknown_health_changes_nothing(run) -> None:
    r = run(curl_rc=7, check_rc=3, show=DRAINED_BY_AGENTD)
    assert r.rc == 3 and r.updates == []
    assert "unknown" in r.log


def test_no_curl_uses_agentd_check(run, tmp_path: Path) -> None:
    (tmp_path / "bin" / "curl").unlink()
    wrap: tuple[str, ...] = ()
    if curls := system_curls():  # hide them: bind an empty, non-executable file over each
        if (unshare := private_mounts()) is None:
            pytest.skip(f"{', '.join(curls)} installed and no private mount namespace to hide it in")
        mount = shutil.which("mount", path=SYSTEM_PATH)
        assert mount is not None
        blank = tmp_path / "no-curl"
        blank.write_text("")
        hide = " && ".join(f"{shlex.quote(mount)} --bind {shlex.quote(str(blank))} {shlex.quote(c)}" for c in curls)
        wrap = (*unshare, SHELL, "-c", f'{hide} && exec "$@"', "hide-curl")
    # The precondition, checked: with the script's own PATH extension, no curl is found.
    search = f'PATH="$PATH:{":".join(script_system_dirs())}"; command -v curl'
    found = subprocess.run([*wrap, SHELL, "-c", search], env={"PATH": str(tmp_path / "bin")}, capture_output=True, text=True, timeout=30)
    assert found.returncode != 0 and found.stdout == "", found
    # Any curl that still ran would reach this listener instead of some agentd on the host.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        r = run(check_body="degraded\nwarning x y: z\n", check_rc=1, wrap=wrap, AGENTD_URL=url)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert r.rc == 1 and r.agentd_calls == ["check --format text"] and r.updates == []


@pytest.mark.skipif(shutil.which("timeout") is None, reason="coreutils timeout not installed")
def test_hanging_daemon_query_is_cut_off(run) -> None:
    # curl that ignores its own --max-time: the wrapper's time limit ends it, then the
    # fallback runs. (The subprocess timeout in `run` is only a guard.)
    r = run(FAKE_CURL_SLEEP="300", check_body="ok\n", check_rc=0)
    assert r.rc == 0 and r.agentd_calls == ["check --format text"]


STALE_ONLY = "critical\ncritical agentd.data.stale nvml: probe nvml last succeeded 95.0 s ago (limit 90.0 s)\n"


def test_critical_only_from_stale_data_asks_agentd_check(run) -> None:
    r = run(body=STALE_ONLY, code=503, check_body="ok\n", check_rc=0, show=IDLE)
    assert r.agentd_calls == ["check --format text"]
    assert r.rc == 0 and r.updates == []


def test_stale_finding_is_never_the_drain_reason(run) -> None:
    body = STALE_ONLY + "critical ib.port.down mlx5_3:1: port state DOWN\n"
    r = run(body=body, code=503)
    assert r.agentd_calls == []
    assert r.updates == [["update", "NodeName=gpu01", "State=DRAIN", "Reason=agentd: ib.port.down mlx5_3:1: port state DOWN"]]


def test_starting_daemon_asks_agentd_check(run) -> None:
    body = "starting\ncritical agentd.starting node: first collection not finished yet\n"
    r = run(body=body, code=503, check_body="critical\ncritical ib.port.down mlx5_0:1: down\n", check_rc=2)
    assert r.agentd_calls == ["check --format text"]
    assert r.updates == [["update", "NodeName=gpu01", "State=DRAIN", "Reason=agentd: ib.port.down mlx5_0:1: down"]]


# --- maintenance (`agentd maintenance on`): neither drain nor resume ------------------

MAINTENANCE = (
    "maintenance\n"
    "maintenance agentd.maintenance node: swapping cables on rail 3 (since 2024-05-01T10:00:00Z)\n"
) + CRITICAL.split("\n", 1)[1]  # the findings are still reported, critical ones too
MAINTENANCE_LOG = "maintenance (swapping cables on rail 3 (since 2024-05-01T10:00:00Z)): node state unchanged"


@pytest.mark.parametrize("show", [DRAINED_BY_AGENTD, IDLE], ids=["drained-by-agentd", "undrained"])
def test_maintenance_from_the_daemon_changes_nothing(run, show: str) -> None:
    r = run(body=MAINTENANCE, code=200, show=show)
    assert r.rc == 0 and r.updates == []  # critical findings drain nothing, an agentd drain stays
    assert r.agentd_calls == []
    assert MAINTENANCE_LOG in r.log


@pytest.mark.parametrize("show", [DRAINED_BY_AGENTD, IDLE], ids=["drained-by-agentd", "undrained"])
def test_maintenance_from_agentd_check_changes_nothing(run, show: str) -> None:
    r = run(curl_rc=7, check_body=MAINTENANCE, check_rc=0, show=show)
    assert r.agentd_calls == ["check --format text"]
    assert r.rc == 0 and r.updates == []
    assert MAINTENANCE_LOG in r.log


def test_starting_daemon_then_maintenance_from_agentd_check(run) -> None:
    # After `agentd maintenance off` the daemon may answer 503 "starting" until a fresh
    # collection: the fallback decides, and here the node is still in maintenance.
    body = "starting\ncritical agentd.starting node: waiting for a fresh collection\n"
    r = run(body=body, code=503, check_body=MAINTENANCE, check_rc=0, show=DRAINED_BY_AGENTD)
    assert r.agentd_calls == ["check --format text"]
    assert r.rc == 0 and r.updates == []


def test_maintenance_without_a_reason_line(run) -> None:
    r = run(body="maintenance\n", code=200, show=DRAINED_BY_AGENTD)
    assert r.rc == 0 and r.updates == []
    assert "maintenance (no reason given): node state unchanged" in r.log


def test_maintenance_is_only_the_first_line(run) -> None:
    # A finding that mentions maintenance does not stop a drain.
    body = "critical\ncritical ib.port.down mlx5_3:1: port DOWN\nmaintenance agentd.maintenance node: old\n"
    r = run(body=body, code=503)
    assert r.rc == 2 and r.updates == [["update", "NodeName=gpu01", "State=DRAIN", "Reason=agentd: ib.port.down mlx5_3:1: port DOWN"]]


# --- the settings file (slurmd passes the wrapper no AGENTD_* variables) ------------


def write_conf(tmp_path: Path, text: str, mode: int = 0o644) -> Path:
    conf = tmp_path / "slurm-healthcheck.conf"
    conf.write_text(text)
    conf.chmod(mode)
    return conf


def other_agentd(tmp_path: Path) -> Path:
    """A second fake agentd, somewhere PATH does not reach, that says which one ran."""
    d = tmp_path / "opt"
    d.mkdir(exist_ok=True)
    exe = d / "agentd"
    exe.write_text(FAKE_AGENTD.replace('"$FAKE_LOG/agentd"', '"$FAKE_LOG/agentd"; echo other >> "$FAKE_LOG/which"'))
    exe.chmod(0o755)
    return exe


def test_settings_come_from_the_file_as_under_slurmd(run, tmp_path: Path) -> None:
    exe = other_agentd(tmp_path)
    write_conf(tmp_path, f"""# agentd-healthcheck settings
AGENTD_URL = http://10.0.0.7:9100
AGENTD_BIN="{exe}"
  AGENTD_NODENAME='gpu-a17'
AGENTD_REASON_MAX=40\r
""")  # the CR: a file edited on Windows
    # slurmd's environment: SLURMD_NODENAME and nothing of ours
    r = run(curl_rc=7, check_body=CRITICAL, check_rc=2, AGENTD_NODENAME="", SLURMD_NODENAME="gpu01")
    assert "http://10.0.0.7:9100/health?format=text" in r.curl_calls[0]
    assert (tmp_path / "log" / "which").read_text() == "other\n" and r.agentd_calls == ["check --format text"]
    assert r.updates[0][:3] == ["update", "NodeName=gpu-a17", "State=DRAIN"]
    assert len(r.updates[0][3]) - len("Reason=") <= 40
    assert "ignored" not in r.log


def test_environment_overrides_the_file(run, tmp_path: Path) -> None:
    write_conf(tmp_path, "AGENTD_URL=http://10.0.0.7:9100\nAGENTD_NODENAME=gpu-a17\nAGENTD_REASON_MAX=40\n")
    r = run(body=CRITICAL, code=503, AGENTD_URL="http://127.0.0.1:9555", AGENTD_NODENAME="gpu02", AGENTD_REASON_MAX="300")
    assert "http://127.0.0.1:9555/health?format=text" in r.curl_calls[0]
    assert r.updates == [["update", "NodeName=gpu02", "State=DRAIN", "Reason=agentd: ib.port.down mlx5_3:1: port state DOWN (expected ACTIVE); check cable (+1 more)"]]


def test_without_a_file_the_defaults_hold(run) -> None:
    r = run(body="ok\n", code=200, AGENTD_NODENAME="", SLURMD_NODENAME="gpu07", show=DRAINED_BY_AGENTD)
    assert "http://127.0.0.1:9478/health?format=text" in r.curl_calls[0]
    assert r.updates == [["update", "NodeName=gpu07", "State=RESUME"]] and r.log == "agentd-healthcheck: resumed gpu07 (ok; was: agentd: ib.port.down mlx5_3:1: port state DOWN [root@2024-05-01T10:00:00])\n"


def test_hostile_lines_are_data_never_run(run, tmp_path: Path) -> None:
    marks = [tmp_path / f"pwned{i}" for i in range(6)]
    write_conf(tmp_path, "\n".join([
        f"AGENTD_BIN=$(touch {marks[0]})",
        f"AGENTD_URL=`touch {marks[1]}`",
        f"$(touch {marks[2]})",
        f"AGENTD_NODENAME=gpu01; touch {marks[3]}",
        f"AGENTD_REASON_MAX=$(touch {marks[4]})",
        f"PATH={tmp_path}/evil; touch {marks[5]}",
    ]) + "\n")
    r = run(curl_rc=7, check_rc=2, check_body=CRITICAL, AGENTD_NODENAME="", SLURMD_NODENAME="gpu01")
    assert not [m for m in marks if m.exists()]
    # the values that fail validation are ignored; AGENTD_BIN is a literal command name
    assert "http://127.0.0.1:9478/health?format=text" in r.curl_calls[0]
    assert r.agentd_calls == [] and r.rc == 3 and r.updates == []
    for what in ("AGENTD_URL is not an http(s) URL", "not KEY=value", "AGENTD_NODENAME is not a node name",
                 "AGENTD_REASON_MAX is not a number", "unknown setting 'PATH'"):
        assert what in r.log, what


def test_a_file_others_may_write_is_ignored(run, tmp_path: Path) -> None:
    exe = other_agentd(tmp_path)
    write_conf(tmp_path, f"AGENTD_BIN={exe}\nAGENTD_NODENAME=gpu-a17\n", mode=0o666)
    r = run(curl_rc=7, check_body="ok\n", check_rc=0, AGENTD_NODENAME="", SLURMD_NODENAME="gpu01", show=DRAINED_BY_AGENTD)
    assert "writable by others or not owned by root; ignored" in r.log
    assert not (tmp_path / "log" / "which").exists() and r.agentd_calls == ["check --format text"]
    assert r.updates == [["update", "NodeName=gpu01", "State=RESUME"]]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give the file to another owner")
def test_a_file_owned_by_someone_else_is_ignored(run, tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "AGENTD_NODENAME=gpu-a17\n")
    os.chown(conf, 65534, 65534)
    r = run(body="ok\n", code=200, AGENTD_NODENAME="", SLURMD_NODENAME="gpu01", show=DRAINED_BY_AGENTD)
    assert "not owned by root; ignored" in r.log
    assert r.updates == [["update", "NodeName=gpu01", "State=RESUME"]]


def test_nothing_to_judge_neither_drains_nor_resumes(run) -> None:
    """A node with no GPUs and no RDMA devices (issue 43): the daemon says so with 200, the
    one-shot check with exit 4; the node is left as it is, even a drain of agentd's own."""
    r = run(body="nothing-to-judge\nnothing to judge: no GPUs, no RDMA devices\n", code=200, show=DRAINED_BY_AGENTD)
    assert r.rc == 4 and r.updates == [] and r.agentd_calls == []
    assert "nothing to judge" in r.log
    r = run(curl_rc=7, check_body="nothing-to-judge\nnothing to judge: no GPUs, no RDMA devices\n", check_rc=4, show=DRAINED_BY_AGENTD)
    assert r.rc == 4 and r.updates == [] and r.agentd_calls == ["check --format text"]


def test_remediation_lines_of_the_check_text_change_nothing_the_wrapper_reads(run) -> None:
    body = ("critical\ncritical ib.port.down mlx5_3:1: port DOWN\n  remediation: enable it (`ibportstate 7 1 enable`)\n"
            "warning mtu.mismatch eth2: MTU 1500\n  remediation: critical: set the MTU\n")
    r = run(curl_rc=7, check_body=body, check_rc=2)
    assert r.updates == [["update", "NodeName=gpu01", "State=DRAIN", "Reason=agentd: ib.port.down mlx5_3:1: port DOWN"]]
