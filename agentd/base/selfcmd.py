"""How to run this agentd again from a shell, for the commands agentd prints as hints. A leaf.

After ``make demo`` the command is ``.venv/bin/agentd``, which is not on PATH: a hint that
says ``agentd simulate ...`` cannot be run as printed. ``agentd_command()`` names the
command that started this process the way a shell finds it: ``agentd`` when PATH finds
this very program, else its absolute path, else ``python -m agentd`` with this interpreter.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys


def agentd_command(argv0: str | None = None, path: str | None = None) -> str:
    """The shell words that run this agentd (``argv0``: default ``sys.argv[0]``; ``path``:
    default ``$PATH``), quoted for a shell."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    name = os.path.basename(argv0)
    if name in ("__main__.py", "-m", "-c", "") or not os.path.isfile(argv0):
        return f"{shlex.quote(sys.executable)} -m agentd"
    found = shutil.which(name, path=path) if name == "agentd" else None
    if found is not None and os.path.realpath(found) == os.path.realpath(argv0):
        return "agentd"
    return shlex.quote(os.path.abspath(argv0))
