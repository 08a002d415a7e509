"""Measured collectives: ``agentd bench nccl`` (opt-in).

Pure parts: ``ncclparse`` (nccl-tests output), ``formulas`` (algbw/busbw as nccl-tests
computes them), ``expect`` (fabric detection, expected and minimum busbw), ``findings``
(``bench.nccl.*``), ``metrics`` (Prometheus families), ``history.compare``, ``safety``.
Shell: ``runners`` (nccl-tests binaries or ``torchbench`` in a bounded child process),
``history`` (JSON file), ``job`` (one run end to end, for the CLI and the daemon),
``cli`` (argparse wiring). See docs/bench-nccl.md.
"""
