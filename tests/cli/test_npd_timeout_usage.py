"""`agentd check --npd CONCERN --npd-timeout S` with S that is no deadline (issue 42): inf
and 1e300 crashed with "internal error" (OverflowError in the worker's join), and nan, 0
and -1 were refused without the one stdout line NPD shows. A usage error exits 3 (NPD
reads any code but 0 and 1 as unknown) with the reason on stderr and as that line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd import cli


@pytest.mark.parametrize("timeout", ["inf", "1e300", "nan", "-1", "0", "7200"])
def test_a_timeout_that_is_no_deadline_is_a_usage_error_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], timeout: str) -> None:
    (tmp_path / "root" / "sys").mkdir(parents=True)
    rc = cli.main(["check", "--npd", "net", "--npd-timeout", timeout, "--host-root", str(tmp_path / "root")])
    out, err = capsys.readouterr()
    assert rc == 3
    assert out.count("\n") == 1 and out.startswith("unknown: --npd-timeout must be a number of seconds above 0"), out
    assert "--npd-timeout must be" in err and "internal error" not in err
