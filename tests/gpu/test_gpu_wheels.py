"""`make gpu-wheels` (tests/gpu/wheels.py): the wheels the device run installs offline are
agentd's locked runtime dependencies, for the device's Python, one version each."""

from __future__ import annotations

import re
import tomllib

from tests.gpu import wheels
from tests.support.paths import REPO


def test_every_runtime_dependency_is_a_locked_pin():
    pins = wheels.locked_pins(wheels.LOCK.read_text())
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9._-]+", d).group(0).lower() for d in deps}
    assert names <= set(pins), names - set(pins)
    assert all(re.fullmatch(r"\d+(\.\d+)*", v) for v in pins.values()), pins


def test_the_download_is_binary_only_for_the_device_python(tmp_path):
    argv = wheels.download_argv("python3", tmp_path, {"pydantic": "2.14.3", "pyyaml": "6.0.3"})
    assert argv[:4] == ["python3", "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:"} <= set(argv)
    pairs = list(zip(argv, argv[1:]))
    assert ("--python-version", "3.12") in pairs and ("--abi", "cp312") in pairs and ("--implementation", "cp") in pairs
    assert ("--platform", "manylinux2014_x86_64") in pairs and ("-d", str(tmp_path)) in pairs
    assert argv[-2:] == ["pydantic==2.14.3", "pyyaml==6.0.3"]
    assert ("--abi", "cp311") in zip(wheels.download_argv("python3", tmp_path, {}, "3.11"), wheels.download_argv("python3", tmp_path, {}, "3.11")[1:])


def test_one_wheel_per_pin(tmp_path):
    pins = {"pydantic-core": "2.50.4", "typing-extensions": "4.16.0", "pyyaml": "6.0.3"}
    for name in ("pydantic_core-2.50.4-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
                 "pydantic_core-2.41.0-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
                 "typing_extensions-4.16.0-py3-none-any.whl", "structlog-25.1.0-py3-none-any.whl", "notes.txt"):  # fmt: skip
        (tmp_path / name).write_text("")
    stale = [p.name for p in wheels.stale_wheels(tmp_path, pins)]
    assert stale == ["pydantic_core-2.41.0-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "structlog-25.1.0-py3-none-any.whl"]
    assert wheels.missing_pins(tmp_path, pins) == ["pyyaml==6.0.3"]
    assert wheels.wheel_name_version("PyYAML-6.0.3-cp312-cp312-manylinux2014_x86_64.whl") == ("pyyaml", "6.0.3")
