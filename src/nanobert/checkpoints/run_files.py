"""Reading a run's files back: the records of metrics.jsonl and summary.json, also while the run writes them.

What `engine/run_log.py` writes, read back by the page (`serve/served.py`) and by a resumed run
(`RunLog.continue_from`). Kept apart from the writer, so that a reader loads nothing of the training side.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METRICS_NAME = "metrics.jsonl"
SUMMARY_NAME = "summary.json"


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file (none if it does not exist), as far as it is written."""
    return scan_records(path)[0]


def _no_number(name: str) -> None:
    """NaN, Infinity and -Infinity (which json.dumps writes for a diverged loss) read as None."""
    return None


def scan_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The records of a metrics.jsonl that may be being written: (records, damaged lines skipped).

    A last line that is not (yet) a whole JSON object is being appended: it is left for the next look and not
    counted. An earlier one (a run killed mid-line, then resumed) is skipped and counted. NaN and Infinity
    become None, so the records can be sent as strict JSON (the browser page reads them).
    """
    try:
        lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    except (FileNotFoundError, IsADirectoryError):
        return [], 0
    records, damaged = [], 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, parse_constant=_no_number)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif number < len(lines):
            damaged += 1
    return records, damaged


def read_summary(path: Path) -> dict[str, Any] | None:
    """summary.json, or None while there is none or it is half written (the next look reads it whole)."""
    try:
        summary = json.loads(path.read_bytes(), parse_constant=_no_number)
    except (FileNotFoundError, IsADirectoryError, ValueError):  # ValueError: bad JSON or not UTF-8
        return None
    return summary if isinstance(summary, dict) else None


__all__ = ["METRICS_NAME", "SUMMARY_NAME", "read_records", "read_summary", "scan_records"]
