"""Shared helpers for the test suite, imported as ``tests.support.<module>`` (pyproject's
``pythonpath`` puts the repository root on ``sys.path``).

- ``fixtures``: paths to the real upstream data vendored in ``tests/fixtures/`` (sysfs
  trees with their symlinks, command outputs, NCCL topology files) and copies of them.
- ``check_snapshots``, ``nccl_snapshots``, ``service_snapshots``: hand-built snapshots
  (and States) for the checks, the NCCL renderers and the daemon's service layer; the
  ``with_*`` helpers in ``check_snapshots`` change any snapshot.
- ``pcitree``: fake PCI sysfs trees and ``nvidia-smi topo -m`` parsing.
- ``ib_oracles``: independent ibstat/ibstatus parsers and NCCL's GID pick, for checking.
- ``daemon_harness``: real ``agentd run --simulate`` processes for the e2e tests.
- ``grafana``, ``bench_data``: dashboard/rule helpers, captured benchmark outputs.
"""
