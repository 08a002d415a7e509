"""Properties of the node-level parsers: PCI link speed and config space, NVIDIA/kernel
versions, /proc/cpuinfo and /proc/modules, and the simulated NVML JSON reader."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.base import recorded
from agentd.host import modules, nvml, pci, system
from agentd.host.fs import HostRoot, ReadContext
from agentd.model import NvmlInfo
from tests.support.recorded_root import answers_dir

PROFILE = settings.get_profile("agentd")  # registered in conftest.py

LONG_DIGITS = "9" * 4301
line_text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=30)  # no line breaks of any kind

# -- PCI --------------------------------------------------------------------------------


@settings(PROFILE)
@given(st.text() | st.builds("{}{}".format, st.floats(allow_nan=True), st.sampled_from([" GT/s PCIe", " GT/s", "GT/s", " Unknown"])))
def test_parse_link_speed_shapes(text: str) -> None:
    v = pci.parse_link_speed(text)
    assert v is None or type(v) is float


@settings(PROFILE)
@given(st.integers(0, 10**6), st.sampled_from(["", ".0", ".5"]), st.sampled_from([" GT/s PCIe", " GT/s", " GT/s\n"]))
def test_parse_link_speed_round_trips(whole: int, frac: str, unit: str) -> None:
    assert pci.parse_link_speed(f"{whole}{frac}{unit}") == float(f"{whole}{frac}")


@settings(PROFILE)
@given(st.binary(max_size=4200) | st.integers(0, 5000).map(lambda n: b"\xff" * n) | st.integers(64, 4096).flatmap(lambda n: st.binary(min_size=n, max_size=n)))
def test_parse_config_space_any_bytes(buf: bytes) -> None:
    port_type, acs = pci.parse_config_space(buf)
    assert port_type is None or port_type in pci.PORT_TYPES.values()
    assert acs is None or (type(acs) is int and 0 <= acs <= 0xFFFF)


@settings(PROFILE)
@given(
    st.sampled_from([pci.CONFIG_HEADER_BYTES, pci.CONFIG_LEGACY_BYTES, pci.CONFIG_EXTENDED_BYTES]),
    st.integers(0x40 // 4, 0xFC // 4).map(lambda i: i * 4),
    st.integers(0, 15),
    st.integers(0, 0xFFFF),
    st.sampled_from([0, 1]),
    st.binary(max_size=64),
)
def test_parse_config_space_round_trips(size: int, cap_at: int, ptype: int, acs_ctrl: int, header_type: int, noise: bytes) -> None:
    buf = bytearray(((noise or b"\0") * (size // max(1, len(noise)) + 1))[:size])  # noise under the fields we set
    struct.pack_into("<HH", buf, 0, 0x15B3, 0x1021)  # vendor, device
    struct.pack_into("<H", buf, 0x06, 0x0010)  # status: capability list
    buf[0x0E] = header_type
    buf[0x34] = cap_at
    if cap_at + 4 <= size:
        struct.pack_into("<BBH", buf, cap_at, pci.CAP_ID_PCIE, 0, 2 | ptype << 4)
    if size == pci.CONFIG_EXTENDED_BYTES:
        struct.pack_into("<IHH", buf, 0x100, pci.EXT_CAP_ID_ACS | 1 << 16, 0x5F, acs_ctrl)  # next = 0: last
    port_type, acs = pci.parse_config_space(bytes(buf))
    assert port_type == (pci.PORT_TYPES.get(ptype) if cap_at + 4 <= size else None)
    assert acs == (acs_ctrl if size == pci.CONFIG_EXTENDED_BYTES else None)


# -- kernel modules, versions -----------------------------------------------------------

version = st.lists(st.integers(0, 9999), min_size=2, max_size=4).map(lambda p: ".".join(map(str, p)))


@settings(PROFILE)
@given(st.text() | st.builds("NVRM version: {}".format, st.text(max_size=80)))
def test_parse_nvrm_version_shapes(text: str) -> None:
    ver, is_open = modules.parse_nvrm_version(text)
    assert (ver is None or type(ver) is str) and (is_open is None or type(is_open) is bool)


@settings(PROFILE)
@given(version, st.booleans(), st.sampled_from(["x86_64", "aarch64", "ppc64le"]), st.lists(line_text, max_size=3))
def test_parse_nvrm_version_round_trips(ver: str, is_open: bool, arch: str, other: list[str]) -> None:
    kind = f"NVIDIA UNIX Open Kernel Module for {arch}" if is_open else f"NVIDIA UNIX {arch} Kernel Module"
    other = [o for o in other if not o.startswith("NVRM version:")]
    text = "\n".join([*other, f"NVRM version: {kind}  {ver}  Release Build  (dvs-builder@U16)  Tue Feb 20 2024", "GCC version:  gcc 12.3.0"])
    assert modules.parse_nvrm_version(text) == (ver, is_open)


@settings(PROFILE)
@given(st.text())
def test_kernel_version_shapes(text: str) -> None:
    v = modules.kernel_version(text)
    assert v is None or (len(v) == 2 and all(type(x) is int for x in v))


@settings(PROFILE)
@given(st.integers(0, 10**9), st.integers(0, 10**9), st.from_regex(r"(\.\d+)?(-[A-Za-z0-9.+_-]{0,20})?", fullmatch=True), st.sampled_from(["", "\n", " "]))
def test_kernel_version_round_trips(major: int, minor: int, rest: str, tail: str) -> None:
    assert modules.kernel_version(f"{major}.{minor}{rest}{tail}") == (major, minor)


@pytest.mark.parametrize("release", [f"{LONG_DIGITS}.1.0", f"6.{LONG_DIGITS}", "9" * 21 + ".1", "٦.٥.0", "².5.0"])
def test_kernel_version_odd_numbers(release: str) -> None:
    assert modules.kernel_version(release) is None


# -- /proc/cpuinfo, /proc/modules -------------------------------------------------------

cpu_key = st.from_regex(r"[A-Za-z][A-Za-z0-9 _]{0,14}[A-Za-z0-9_]", fullmatch=True).filter(lambda k: k != "processor")
cpu_value = line_text.map(str.strip)


@settings(PROFILE)
@given(st.text())
def test_parse_cpuinfo_shapes(text: str) -> None:
    out = system.parse_cpuinfo(text)
    assert all(type(k) is str and type(v) is str for k, v in out.items())


@settings(PROFILE)
@given(st.dictionaries(cpu_key, cpu_value, max_size=20), st.dictionaries(cpu_key, cpu_value, max_size=5))
def test_parse_cpuinfo_reads_the_first_block(first: dict[str, str], second: dict[str, str]) -> None:
    block = lambda n, kv: "".join([f"processor\t: {n}\n", *(f"{k}\t: {v}\n" for k, v in kv.items())])  # noqa: E731
    assert system.parse_cpuinfo(block(0, first) + "\n" + block(1, second) + "\n") == {"processor": "0", **first}


@settings(PROFILE)
@given(st.text())
def test_parse_proc_modules_shapes(text: str) -> None:
    assert all(type(m) is str and m for m in system.parse_proc_modules(text))


@settings(PROFILE)
@given(st.lists(st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True), max_size=30))
def test_parse_proc_modules_round_trips(names: list[str]) -> None:
    text = "".join(f"{n} {4096 * (i + 1)} {i % 3} - Live 0x0000000000000000\n" for i, n in enumerate(names))
    assert system.parse_proc_modules(text) == tuple(names)


# -- NVML simulation JSON ---------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)
NVML_KEYS = ["available", "driver_version", "cuda_driver_version", "gpus", "error", "hang_s", "init_error"]
GPU_KEYS = ["index", "pci_bus_id", "name", "uuid", "nvlinks", "fabric_state", "fabric_status", "error"]


SIM_FILE = f"{recorded.DIR}/{recorded.NVML}"  # a simulated root's recorded NVML answer (agentd.base.recorded)


@pytest.fixture(scope="module")
def sim_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nvmlroot")
    answers_dir(root)
    return root


@pytest.fixture(scope="module")
def valid_nvml() -> dict[str, Any]:
    node = pytest.importorskip("agentd.sim.node")
    from agentd.sim.build import get_profile

    return node.nvml_data(get_profile("h100-ib"))


def read_nvml(root: Path, text: str) -> tuple[NvmlInfo, ReadContext]:
    (root / SIM_FILE).write_text(text)
    ctx = ReadContext(HostRoot.at(root), "nvml")
    with mock.patch.object(nvml, "_sleep", lambda s: None):  # hang_s must not really sleep
        return nvml.read_nvml(ctx), ctx


def _mutate(data: Any, path: list[int], value: Any) -> Any:
    """Replace one nested value (chosen by ``path``) of a copy of ``data`` with ``value``."""
    out = copy.deepcopy(data)
    node, key = None, None
    cur = out
    for step in path:
        keys = list(cur.keys()) if isinstance(cur, dict) else list(range(len(cur))) if isinstance(cur, list) else []
        if not keys:
            break
        node, key = cur, keys[step % len(keys)]
        cur = cur[key]
    if node is None:
        return value
    node[key] = value
    return out


def _check(info: NvmlInfo, ctx: ReadContext) -> None:
    assert isinstance(info, NvmlInfo)
    assert all(e.kind == "unparsable" and e.path == SIM_FILE for e in ctx.errors)
    if ctx.errors:  # a file that does not parse: no NVML, and the answer says why
        assert not info.available and info.error


@settings(PROFILE)
@given(json_values | st.fixed_dictionaries({}, optional={k: json_values for k in NVML_KEYS}))
def test_nvml_sim_any_json(sim_root: Path, value: Any) -> None:
    _check(*read_nvml(sim_root, json.dumps(value)))


@settings(PROFILE)
@given(st.lists(st.integers(0, 50), max_size=6), json_values | st.sampled_from(GPU_KEYS + ["extra_key"]))
def test_nvml_sim_near_valid_json(sim_root: Path, valid_nvml: dict[str, Any], path: list[int], value: Any) -> None:
    info, ctx = read_nvml(sim_root, json.dumps(_mutate(valid_nvml, path, value)))
    _check(info, ctx)


def test_nvml_sim_round_trips(sim_root: Path, valid_nvml: dict[str, Any]) -> None:
    info, ctx = read_nvml(sim_root, json.dumps(valid_nvml))
    assert ctx.errors == [] and info == NvmlInfo.model_validate({"available": True, **valid_nvml})


@pytest.mark.parametrize(
    "text",
    [pytest.param("[" * 100_000 + "]" * 100_000, id="deep-nesting-RecursionError"), pytest.param('{"cuda_driver_version": ' + LONG_DIGITS + "}", id="huge-int-ValueError")],
)
def test_nvml_sim_json_decoder_limits(sim_root: Path, text: str) -> None:
    info, ctx = read_nvml(sim_root, text)
    _check(info, ctx)
    assert not info.available and ctx.errors
