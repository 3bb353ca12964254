"""Long builds show progress (elapsed time + the newest log line) and log everything."""

from __future__ import annotations

import os

from sglforge.base.logs import log_tail
from sglforge.builder.pipeline import run_logged


def test_progress_lines_and_log_file(tmp_path, capsys):
    log = tmp_path / "logs" / "demo.log"
    rc = run_logged(
        ["sh", "-c", "echo compiling-a.cu; sleep 1.2; echo linking; exit 3"],
        env={"PATH": os.environ["PATH"]},
        cwd=tmp_path,
        log=log,
        label="demo",
        interval=0.5,
    )
    assert rc == 3
    out = capsys.readouterr().out
    assert "  [demo] 0m00s compiling-a.cu" in out or "  [demo] 0m01s compiling-a.cu" in out
    text = log.read_text()
    assert text.startswith(f"$ cd {tmp_path}\n$ sh -c ")
    assert log_tail(log, 2) == "compiling-a.cu\nlinking"
