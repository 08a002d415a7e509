"""NIC temperatures from hwmon (agentd.host.hwmon) and the opt-in link tool
(agentd.host.mstlink).

hwmon files are the kernel's documented sysfs ABI (Documentation/hwmon/sysfs-interface:
millidegrees) as mlx5 registers them (drivers/net/ethernet/mellanox/mlx5/core/hwmon.c:
name "mlx5" under the PCI function; the channel values below are the ones its netdev
submission printed: temp1_crit 105000, temp1_highest 68000, temp1_input 68000,
temp1_label sensor0). The link tool's output is real mlxlink output
(tests/fixtures/link-tool/, SOURCES.md); the tool itself is never run here: a stand-in
runner answers as run_bounded does."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.host import hwmon, mstlink
from agentd.host.fs import HostRoot, ReadContext
from agentd.model import LinkDiag, TempSensor
from tests.support.fixtures import FIXTURES

BUS = "0000:08:00.0"
MLXLINK = (FIXTURES / "link-tool" / "mlxlink-cx6-hdr.txt").read_text()


def _hwmon_tree(root: Path, channels: dict[int, dict[str, str]], bus: str = BUS, name: str = "hwmon3") -> Path:
    d = root / "sys/bus/pci/devices" / bus / "hwmon" / name
    d.mkdir(parents=True)
    (d / "name").write_text("mlx5\n")
    for ch, files in channels.items():
        for attr, value in files.items():
            (d / f"temp{ch}_{attr}").write_text(value + "\n")
    return d


def _ctx(root: Path) -> ReadContext:
    return ReadContext(HostRoot(root, "offline", "test"), "optics")


def test_mlx5_channels_from_older_and_newer_firmware(tmp_path):
    _hwmon_tree(tmp_path, {1: {"input": "68000", "highest": "68000", "crit": "105000", "label": "sensor0"},
                           2: {"input": "57000", "highest": "58000", "crit": "70000", "label": "sensor64"}})
    ctx = _ctx(tmp_path)
    out = hwmon.read_hwmon(ctx, [BUS])
    assert out == {BUS: (TempSensor(hwmon="hwmon3", channel=1, label="sensor0", kind="asic", temperature_c=68.0, highest_c=68.0, critical_c=105.0),
                         TempSensor(hwmon="hwmon3", channel=2, label="sensor64", kind="module", temperature_c=57.0, highest_c=58.0, critical_c=70.0))}
    assert ctx.errors == []
    assert [hwmon.sensor_kind(x) for x in ("asic", "Module0", "sensor12", "sensor65", None, "board")] == ["asic", "module", "asic", "module", "other", "other"]


def test_the_gate_reads_nothing_of_a_refused_device(tmp_path):
    _hwmon_tree(tmp_path, {1: {"input": "68000", "label": "asic"}})
    _hwmon_tree(tmp_path, {1: {"input": "50000", "label": "asic"}}, bus="0000:09:00.0", name="hwmon4")
    ctx = _ctx(tmp_path)
    out = hwmon.read_hwmon(ctx, [BUS, "0000:09:00.0"], may_read=lambda bus: bus != BUS)
    assert list(out) == ["0000:09:00.0"]
    assert ctx.files_read == 2  # the label and input of the allowed device: nothing of the other


def test_odd_files_are_read_errors_and_a_device_without_hwmon_is_none(tmp_path):
    _hwmon_tree(tmp_path, {1: {"input": "hot", "label": "asic"}, 2: {"input": "", "crit": "\xff"}})
    ctx = _ctx(tmp_path)
    out = hwmon.read_hwmon(ctx, [BUS, "0000:0a:00.0"])
    assert [(t.channel, t.temperature_c, t.critical_c) for t in out[BUS]] == [(1, None, None), (2, None, None)]
    assert {e.kind for e in ctx.errors} == {"unparsable"}


def test_mlxlink_output_parses_to_its_ber_and_counters():
    d = mstlink.parse(MLXLINK, "mlxlink")
    assert d == LinkDiag(tool="mlxlink", effective_ber=15e-255, raw_ber=1e-7, symbol_ber=15e-255, effective_errors=0,
                         link_error_recovery=0, recommendation="No issue was observed")
    assert mstlink.parse(mstlink.format_output(d), "mlxlink") == d  # what a capture records reads back
    assert mstlink.parse("-E- Device not found\n", "mstlink") is None
    ranged = mstlink.parse("Temperature [C]                 : 44 [-5..75]\nRx Power Current [dBm]          : 1.2,0.9,-0.3,n/a [-10..4]\n", "mlxlink")
    assert ranged is not None and ranged.module_temperature_c == 44.0 and ranged.rx_power_dbm == (1.2, 0.9, -0.3)


class _Runner:
    def __init__(self, answers: dict[str, tuple[int, str, str, bool]]):
        self.answers, self.calls = answers, []

    def __call__(self, argv, *, env, timeout_s, max_output_bytes):
        self.calls.append(list(argv))
        return self.answers[argv[2]]


def test_the_link_tool_runs_once_per_allowed_port_without_a_shell():
    ports = [("mlx5_0", 1, "0000:0c:00.0"), ("mlx5_1", 1, "0000:12:00.0"), ("mlx5_2", 1, "0000:4b:00.0"), ("mlx5_3", 1, "0000:54:00.0")]
    run = _Runner({"0000:0c:00.0": (0, MLXLINK, "", False), "0000:12:00.0": (-9, "", "", True), "0000:4b:00.0": (1, "", "-E- Failed to open device\n", False)})
    ctx = ReadContext(HostRoot.at("/"), "optics")
    out = mstlink.read_link_diag(ctx, "mstlink", ports, timeout_s=20, runner=run, which=lambda tool: "/usr/bin/mstlink",
                                 may_read=lambda bus: bus != "0000:54:00.0")
    assert list(out) == [("mlx5_0", 1)] and out[("mlx5_0", 1)].raw_ber == 1e-7
    assert run.calls == [["/usr/bin/mstlink", "-d", b, "-c", "-m"] for _, _, b in ports[:3]]
    assert [(e.path, e.kind) for e in ctx.errors] == [("exec(mstlink -d 0000:12:00.0)", "timeout"), ("exec(mstlink -d 0000:4b:00.0)", "unreadable")]
    assert "Failed to open device" in ctx.errors[1].detail


def test_a_missing_tool_is_one_error():
    ctx = ReadContext(HostRoot.at("/"), "optics")
    out = mstlink.read_link_diag(ctx, "mlxlink", [("mlx5_0", 1, BUS)], timeout_s=5, runner=_Runner({}), which=lambda tool: None)
    assert out == {} and [(e.path, e.kind) for e in ctx.errors] == [("exec(mlxlink)", "unavailable")]


@pytest.mark.parametrize("text", ["", "\0\xff" * 100, "Effective Physical BER : abc\n"])
def test_recorded_link_tool_answers(tmp_path, text):
    d = tmp_path / ".agentd/link-tool"
    d.mkdir(parents=True)
    (d / "mlx5_0_1").write_text(MLXLINK)
    (d / "mlx5_1_1").write_text(text)
    ctx = ReadContext(HostRoot(tmp_path, "offline", "test", answers=".agentd"), "optics")
    out = mstlink.read_link_diag(ctx, "mstlink", [("mlx5_0", 1, BUS), ("mlx5_1", 1, "0000:09:00.0")], timeout_s=5)
    assert out[("mlx5_0", 1)].raw_ber == 1e-7
    assert ("mlx5_1", 1) not in out or out[("mlx5_1", 1)].effective_ber is None
