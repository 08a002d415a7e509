"""The ``agentd`` command's entry point (the console script, ``python -m agentd`` and the
packages' launchers): mark the process lean before anything imports ``hashlib``
(agentd.base.openssl_gate), then run the CLI (agentd.cli.main)."""

from __future__ import annotations

from agentd.base.openssl_gate import lean_process


def main() -> int:
    lean_process()
    from agentd.cli import main as cli_main

    return cli_main()
