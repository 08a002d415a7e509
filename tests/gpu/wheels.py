#!/usr/bin/env python3
"""``make gpu-wheels``: agentd's runtime dependencies as wheels for the device machine.

The device machine has no network (tests/gpu/README.md), so what agentd needs travels as
wheels in an ignored folder the device tool carries (``.gpu-wheels/`` by default), and
tests/gpu/gpu_check.py installs them there with pip, offline, into its scratch folder.

The set is every pin of packaging/requirements.lock (agentd's runtime dependencies,
pinned as the packages install them), for CPython 3.12 on manylinux x86-64 by default:
the versions agentd is tested and shipped with, whatever the device image happens to hold
(its torch, NCCL and NVML are not among them and stay the image's). One wheel per pin;
wheels of other versions left in the folder from an earlier pin are removed, since two
versions of one package in one install stop it.

Only the standard library and pip.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "packaging" / "requirements.lock"
DEST = REPO / ".gpu-wheels"
# The device tool's advice (its README): pip matches a manylinux tag's glibc version exactly,
# so every tag a wheel of these packages may carry is named.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64",
             "manylinux1_x86_64")  # fmt: skip

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def locked_pins(text: str) -> dict[str, str]:
    """``name==version`` of every requirement line of a pip-compile/uv lock file."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        m = _PIN.match(line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def normalize(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def download_argv(python: str, dest: Path, pins: dict[str, str], python_version: str = "3.12") -> list[str]:
    """pip download of exactly these pins, binary wheels only, for another interpreter."""
    abi = "cp" + python_version.replace(".", "")
    argv = [python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "--python-version", python_version, "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none"]  # fmt: skip
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    argv += ["--platform", "any", "-d", str(dest)]
    return argv + [f"{name}=={version}" for name, version in sorted(pins.items())]


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) of a wheel file name, None for anything else."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[: -len(".whl")].split("-")
    return (normalize(parts[0]), parts[1]) if len(parts) >= 5 else None


def stale_wheels(dest: Path, pins: dict[str, str]) -> list[Path]:
    """Wheels in ``dest`` that are not one of the pins (another version, or no longer a dependency)."""
    wanted = {(normalize(n), v) for n, v in pins.items()}
    return sorted(p for p in dest.glob("*.whl") if wheel_name_version(p.name) not in wanted)


def missing_pins(dest: Path, pins: dict[str, str]) -> list[str]:
    have = {wheel_name_version(p.name) for p in dest.glob("*.whl")}
    return sorted(f"{n}=={v}" for n, v in pins.items() if (normalize(n), v) not in have)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="wheels", description="download agentd's runtime dependencies as wheels for the GPU check")
    ap.add_argument("--dest", type=Path, default=DEST, help="folder for the wheels (default .gpu-wheels/)")
    ap.add_argument("--python-version", default="3.12", help="the target interpreter's X.Y (default 3.12, the device image's)")
    ap.add_argument("--lock", type=Path, default=LOCK)
    args = ap.parse_args(argv)
    pins = locked_pins(args.lock.read_text())
    args.dest.mkdir(parents=True, exist_ok=True)
    for p in stale_wheels(args.dest, pins):
        p.unlink()
    rc = subprocess.call(download_argv(sys.executable, args.dest, pins, args.python_version))
    missing = missing_pins(args.dest, pins)
    size = sum(p.stat().st_size for p in args.dest.glob("*.whl"))
    print(f"{args.dest}: {len(pins) - len(missing)} of {len(pins)} wheels, {size / 1e6:.1f} MB")
    if rc != 0 or missing:
        print(f"missing: {', '.join(missing) or '-'} (pip exit status {rc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
