"""The series budget section of docs/metrics.md (static text; tests/golden/test_series_budget.py
measures the numbers from real renders and fails when they drift or h100-ib exceeds
``H100_IB_LIMIT`` at the defaults)."""

from __future__ import annotations

H100_IB_LIMIT = 1200

SECTION = """## Series budget

Series one node exports at the default settings and with every `[metrics]` detail key on
(one collection of the simulated node, judged and rendered as the daemon renders it; the
running daemon adds about 40 of its own: collection tiers, written files, process). A fleet
multiplies these by its node count: 10,000 h100-ib nodes carry about 11 M series at the
defaults, 29 M with all detail on. `tests/golden/test_series_budget.py` measures them and
fails when h100-ib exceeds 1,200 at the defaults or with every `[enforce]` knob named, or
this table is out of date. With `enforce.mode = "apply"` the enforcer adds its counters
(`agentd_enforce_applies_total`, `_failures_total`, `_stuck` per named knob, the window,
the last apply time once a change was made): 4 to 5 series a knob.

| node | defaults | all detail on |
|---|---|---|
| `h100-ib` (8x H100 SXM, 18 NVLinks each, 8 NDR compute + 2 RoCE storage NICs) | 1,147 | 2,856 |
| `h100-ib with [enforce]` (mode plan, every knob named: `agentd_enforce_info`, `agentd_enforce_drift` per knob) | 1,156 | 2,865 |
| `large-16gpu-18nic` (16x H100, 16 NDR compute + 2 storage NICs) | 2,003 | 5,184 |
| `no-gpu-no-hca` (a node without GPUs or HCAs) | 110 | 110 |

What the defaults fold, and the key that restores the per-item series (`[metrics]` in
agentd.toml, docs/config.md):

| per-item series | at the defaults | detail key |
|---|---|---|
| `agentd_nvlink_link_errors_total` (GPU x link x kind: 576 on h100-ib) | `agentd_nvlink_errors_total` per GPU and kind, summed over its links (as dcgm-exporter's `DCGM_FI_DEV_NVLINK_*_TOTAL`; its per-link `_L0`..`_L17` fields are opt-in too) | `nvlink_per_link` |
| `agentd_nvlink_state`, `agentd_nvlink_info` for every link | `agentd_nvlink_links` and `agentd_nvlink_links_up` per GPU, `agentd_nvlink_remote_links` per GPU and remote end (NVSwitch), and `agentd_nvlink_state`/`agentd_nvlink_info` only for links that are not up | `nvlink_per_link` |
| `agentd_ib_port_hw_counters_total` (port x unnamed counter) | `agentd_ib_hw_counters_total` per counter, summed over the node's ports (node_exporter exports no hw_counters; telegraf gathers them only with `gather_rdma`) | `ib_counters_per_port` |
| `agentd_ib_port_multicast_packets_{transmitted,received}_total` (2 per HCA port: 20 on h100-ib) | `agentd_ib_hw_counters_total{counter="multicast_xmit_packets"}` and `{counter="multicast_rcv_packets"}`, summed over the node's ports (NCCL's traffic is unicast) | `ib_counters_per_port` |
| `agentd_ib_port_pma_saturated` 0 for every fixed-width counter | the flag (1) only for a saturated counter, and `agentd_ib_pma_saturated_counters` for the node | - (a 0 flag says no more than the count) |
| PCIe link speed/width, ACS and AER totals of every bridge | link series for every GPU, HCA and NVSwitch, and for a bridge while it runs below its own maximum; the ACS flag where redirect is on, and `agentd_pcie_acs_redirect_bridges`; AER totals per GPU and HCA function, the bridges' summed per severity (`agentd_pcie_aer_bridge_errors_total`) | `pcie_bridges` |
| RoCE per-priority counters for priorities 0-7 | `roce.priority` (the lossless class) on its own, the other seven summed as `priority="other"` | `roce_every_priority` |
| every HCA temperature sensor (2 per ConnectX-7 with a module: 20 on h100-ib) with its critical and highest temperatures; every module's identity, temperature, supply voltage, lanes (Rx/Tx power, bias: 24 for an 8-lane OSFP, 12 for a 4-lane QSFP28) and thresholds (20); the PHY's link-down events and corrected FEC blocks | the node's hottest HCA sensor (`agentd_nic_temperature_max_celsius`) and hottest module (`agentd_transceiver_temperature_max_celsius`); per Ethernet port its weakest lit lane's Rx power (`agentd_transceiver_rx_power_min_watts`), uncorrectable FEC blocks and corrected bits; the findings judge every sensor, module, lane and threshold, and count link-downs (`optics.link.down_events`) | `optics_detail` |

Trade-offs. A counter series that appears only once it is non-zero loses its first
increment in `rate()`/`increase()` (Prometheus has no earlier sample to subtract), so
agentd never does that to a counter: counters are folded into sums that always exist
(per GPU, per node, per "other" priority), and the per-item counters are opt-in. A sum
over items resets when one item does (a driver reload zeroes one port): `rate()` then
reads that one scrape as a reset, as it does for dcgm-exporter's totals. Gauges whose
usual value is the default (a link up, a counter not saturated, ACS off) appear only
where they are not, beside a count that always exists, so `== 0`/`== 1` alerts and
"how many" panels keep working; an absent series means "as expected", not "unknown"
(unknown shows as `agentd_pcie_config_space_truncated` and read errors).
"""

