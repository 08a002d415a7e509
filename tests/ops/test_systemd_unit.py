"""The systemd unit, its drop-in examples and the packaged config.

`systemd-analyze verify` insists that ExecStart= names an existing executable, so the
unit is copied to a temp directory with ExecStart rewritten to this checkout's
.venv/bin/agentd (or /bin/true when there is none); nothing else changes.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from agentd.config import AgentConfig, load_config

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "systemd"
UNIT = SYSTEMD / "agentd.service"
EXAMPLE_CONFIG = SYSTEMD / "agentd.toml.example"
DROPINS = sorted(SYSTEMD.glob("agentd-*.conf.example"))
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed (Debian package: systemd)")
MAX_EXPOSURE = 2.0


def _unit_lines(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def _settings(path: Path) -> dict[str, list[str]]:
    d: dict[str, list[str]] = {}
    for k, v in _unit_lines(path):
        d.setdefault(k, []).append(v)
    return d


def _install(tmp_path: Path, dropins: list[Path] = ()) -> Path:
    exe = REPO / ".venv" / "bin" / "agentd"
    exe_path = str(exe) if exe.exists() else "/bin/true"
    text = re.sub(r"^ExecStart=/usr/bin/agentd", f"ExecStart={exe_path}", UNIT.read_text(), flags=re.M)
    assert text != UNIT.read_text()
    unit = tmp_path / "agentd.service"
    unit.write_text(text)
    if dropins:
        d = tmp_path / "agentd.service.d"
        d.mkdir()
        for p in dropins:
            shutil.copy(p, d / p.name.replace("agentd-", "").replace(".example", ""))
    return unit


def _exposure(unit: Path) -> float:
    proc = subprocess.run([ANALYZE, "security", "--offline=yes", "--no-pager", str(unit)], capture_output=True, text=True)
    m = re.search(r"Overall exposure level for agentd\.service: (\d+\.\d+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    return float(m.group(1))


@pytest.mark.proc
@needs_analyze
def test_security_exposure_within_threshold(tmp_path: Path) -> None:
    unit = _install(tmp_path)
    proc = subprocess.run([ANALYZE, "security", "--offline=yes", "--threshold=20", "--no-pager", str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    score = _exposure(unit)
    print(f"systemd-analyze security exposure: {score}")
    assert score <= MAX_EXPOSURE


@pytest.mark.proc
@needs_analyze
@pytest.mark.parametrize("dropins", [[], *([p] for p in DROPINS), DROPINS], ids=["unit", *(p.name for p in DROPINS), "all"])
def test_verify_is_clean(tmp_path: Path, dropins: list[Path]) -> None:
    unit = _install(tmp_path, dropins)
    proc = subprocess.run([ANALYZE, "verify", "--man=no", str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout + proc.stderr == "", proc.stdout + proc.stderr


@pytest.mark.proc
@needs_analyze
@pytest.mark.parametrize("dropin", DROPINS, ids=lambda p: p.name)
def test_drop_ins_keep_exposure_within_threshold(tmp_path: Path, dropin: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "with").mkdir()
    base = _exposure(_install(tmp_path / "base"))
    with_dropin = _exposure(_install(tmp_path / "with", [dropin]))
    print(f"{dropin.name}: exposure {base} -> {with_dropin}")
    assert base <= with_dropin <= MAX_EXPOSURE


def test_unit_contract() -> None:
    s = _settings(UNIT)
    one = {k: v[-1] for k, v in s.items()}
    assert one["Type"] == "notify" and one["NotifyAccess"] == "main"
    assert one["ExecStart"] == "/usr/bin/agentd run"  # the deb and rpm launcher
    # Reload without procps: no kill(1) binary, the shell's builtin (issue 18).
    reload = shlex.split(one["ExecReload"])
    assert reload[0] == "/bin/sh" and "kill" not in reload[0]
    assert "/bin/kill" not in one["ExecReload"] and "/usr/bin/kill" not in one["ExecReload"]
    assert one["Restart"] == "on-failure" and one["WatchdogSec"] == "30s"
    assert one["User"] == one["Group"] == "agentd" and "DynamicUser" not in one
    assert one["ProtectSystem"] == "strict" and one["StateDirectory"] == "agentd"
    assert s["ReadWritePaths"] == ["/etc/nccl"]
    # One capability, CAP_SYSLOG, and only to read /dev/kmsg (issue 14; the unit's header
    # has the reasoning): held in the initial user namespace, with the device read only
    # and syslog(2) still outside the system call filter.
    assert one["CapabilityBoundingSet"] == one["AmbientCapabilities"] == "CAP_SYSLOG"
    assert one["PrivateUsers"] == "no" and one["ProtectKernelLogs"] == "no"
    assert "/dev/kmsg r" in s["DeviceAllow"]
    assert s["SystemCallFilter"][0] == "@system-service"  # an allow list without syslog(2)
    assert one["NoNewPrivileges"] == "yes"
    assert set(one["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    assert one["UMask"] == "0022"  # NCCL files must be readable by every job
    assert one["IPAddressDeny"] == "any" and one["IPAddressAllow"] == "localhost"
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment]
    parser.read_string(UNIT.read_text())
    assert parser.sections() == ["Unit", "Service", "Install"]
    assert parser["Install"]["WantedBy"] == "multi-user.target"


def _systemd_expand(argv: list[str], env: dict[str, str]) -> list[str]:
    """What systemd makes of a command line's words (systemd.service(5), "Command lines"):
    "$$" is a literal "$", "${NAME}" the variable's value, "$NAME" as a word of its own its
    value split at whitespace; unknown variables are empty."""
    out: list[str] = []
    for word in argv:
        if (m := re.fullmatch(r"\$(\w+)", word)) is not None:
            out += env.get(m.group(1), "").split()
            continue
        out.append(re.sub(r"\$\$|\$\{(\w+)\}", lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), ""), word))
    return out


@pytest.mark.proc
def test_reload_signals_the_main_process_without_a_kill_binary() -> None:
    """ExecReload= run as systemd runs it: its words expanded, MAINPID in the control
    process's environment (systemd.exec(5)), and a PATH where no kill(1) can be found."""
    reload = [v for k, v in _unit_lines(UNIT) if k == "ExecReload"][-1]
    # as systemd starts a main process: SIGHUP at its default action, even when this test
    # runs under nohup (an ignored signal stays ignored across exec)
    main = subprocess.Popen(["sleep", "600"], preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        env = {"MAINPID": str(main.pid), "PATH": "/nonexistent"}
        argv = _systemd_expand(shlex.split(reload), env)
        assert os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK), argv
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert main.wait(timeout=30) == -signal.SIGHUP
    finally:
        if main.poll() is None:
            main.kill()
            main.wait()


NVIDIA_MAJOR = 195  # fixed: Linux Documentation/admin-guide/devices.txt (195:255 = /dev/nvidiactl)


def test_nvml_device_access_survives_a_late_driver() -> None:
    """char-nvidia* resolves from /proc/devices when the unit starts; the /dev/char/195:N
    entries are parsed by systemd without the node existing, so a driver loaded after
    agentd started is still reachable. Read/write only, never mknod."""
    s = _settings(UNIT)
    one = {k: v[-1] for k, v in s.items()}
    assert one["DevicePolicy"] == "closed" and one["PrivateDevices"] == "no"
    allowed = dict(v.split() for v in s["DeviceAllow"])
    assert allowed.pop("char-nvidia*") == "rw"
    assert allowed.pop("/dev/kmsg") == "r"  # the kernel log, read only (test_unit_contract)
    want = {f"/dev/char/{NVIDIA_MAJOR}:{m}" for m in (255, *range(16))}
    assert set(allowed) == want and set(allowed.values()) == {"rw"}
    # glob-free paths only: systemd matches globs in group names, not in paths
    assert not any(ch in spec for spec in allowed for ch in "*?[")


def test_unit_wants_what_creates_the_nvidia_nodes() -> None:
    s = _settings(UNIT)
    assert "nvidia-persistenced.service" in " ".join(s["Wants"]).split()
    assert "nvidia-persistenced.service" in " ".join(s["After"]).split()
    # agentd never loads the driver or creates nodes itself
    assert not any(k.startswith("ExecStartPre") for k in s)
    assert {k: v[-1] for k, v in s.items()}["NoNewPrivileges"] == "yes"


def test_nvidia_group_dropin_adds_only_a_supplementary_group() -> None:
    s = {k: v[-1] for k, v in _settings(SYSTEMD / "agentd-nvidia-group.conf.example").items()}
    assert list(s) == ["SupplementaryGroups"] and s["SupplementaryGroups"].split() == ["video"]


@pytest.mark.parametrize("dropin", DROPINS, ids=lambda p: p.name)
def test_packages_ship_every_dropin_example(dropin: Path) -> None:
    deb = (REPO / "packaging" / "deb" / "build.sh").read_text().replace("\\\n", " ")
    rpm = (REPO / "packaging" / "rpm" / "agentd.spec").read_text()
    assert re.search(rf"^for f in .*\b{re.escape(dropin.name)}\b.*; do$", deb, re.M), "deb build.sh examples loop"
    assert re.search(rf"^%doc .*systemd/{re.escape(dropin.name)}\b", rpm, re.M), "rpm %doc"
    assert dropin.name in UNIT.read_text(), "the unit's header lists its examples"


def test_acs_dropin_grants_only_cap_sys_admin_outside_userns() -> None:
    s = {k: v[-1] for k, v in _settings(SYSTEMD / "agentd-acs.conf.example").items()}
    assert s == {"AmbientCapabilities": "CAP_SYS_ADMIN", "CapabilityBoundingSet": "CAP_SYS_ADMIN", "PrivateUsers": "no"}


def test_listen_dropin_matches_config_syntax() -> None:
    s = _settings(SYSTEMD / "agentd-listen.conf.example")
    envs = dict(e.split("=", 1) for e in s["Environment"])
    cfg = load_config(EXAMPLE_CONFIG, environ=envs)
    assert cfg.listen == "0.0.0.0:9478"
    assert s["IPAddressAllow"] and "any" not in s["IPAddressAllow"]


def test_example_config_loads_and_writes_only_where_the_unit_allows() -> None:
    cfg = load_config(EXAMPLE_CONFIG, environ={})
    writable = [Path(p) for p in _settings(UNIT)["ReadWritePaths"]] + [Path("/var/lib") / _settings(UNIT)["StateDirectory"][0]]
    for path in (cfg.paths.nccl_env, cfg.paths.nccl_conf, cfg.paths.nccl_topo, cfg.paths.baseline, cfg.paths.state_dir / "x"):
        assert any(path.parent == w or w in path.parents for w in writable), f"{path} is not writable under the unit's sandbox"
    # Everything else is at its default: the file documents, it does not configure.
    defaults = AgentConfig().model_dump()
    got = cfg.model_dump()
    got["paths"].update({k: defaults["paths"][k] for k in ("nccl_env", "nccl_conf")})
    assert got == defaults


def _keys(model: type, prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if hasattr(type(default), "model_fields"):
            out += _keys(type(default), f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def test_example_config_documents_every_setting() -> None:
    """Every key of AgentConfig appears (commented or not) under its section, so the
    example cannot silently fall behind the models."""
    section = ""
    seen: set[str] = set()
    for raw in EXAMPLE_CONFIG.read_text().splitlines():
        line = raw.lstrip("#").strip()
        if m := re.fullmatch(r"\[([a-z_.]+)\].*", line):
            parts = m.group(1).split(".")
            section = parts[0] + "."
            seen.add(".".join(parts[:2]))  # [nccl.overrides], [thresholds.counters]: dict-valued keys
        elif m := re.match(r"([a-z_]+)\s*=", line):
            seen.add(section + m.group(1))
    seen |= {k.removeprefix(".") for k in seen}
    missing = [k for k in _keys(AgentConfig) if k not in seen]
    assert missing == []


@pytest.mark.proc
@needs_analyze
def test_verify_would_report_a_broken_drop_in(tmp_path: Path) -> None:
    """Control for test_verify_is_clean: drop-ins beside the copied unit are read."""
    bad = tmp_path / "agentd-bad.conf.example"
    bad.write_text("[Service]\nProtectSytem=strict\n")
    (tmp_path / "u").mkdir()
    unit = _install(tmp_path / "u", [bad])
    proc = subprocess.run([ANALYZE, "verify", "--man=no", str(unit)], capture_output=True, text=True)
    assert "ProtectSytem" in proc.stdout + proc.stderr
