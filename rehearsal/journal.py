"""The rehearsal's journal: one JSON line per answer the shoppers got (and per fact a shopper
learnt, such as an order's number), written by the process that runs the report — Locust's
master, or the only process. Workers send theirs to the master in batches (Locust's own
messages), so a distributed rehearsal has one journal.

A line: {"t": start (epoch s, this machine's clock), "ms": answer time, "n": what was asked,
"s": HTTP status (0: no answer), "c": the answer's JSON code, "u": the shopper's index,
"o": an order number when there is one}."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

MESSAGE = "rehearsal_journal"
ANSWERS = "answers.jsonl"
SAMPLES = "samples.jsonl"


class Journal:
    """Lines kept in memory and appended to ``directory/answers.jsonl`` (or, on a worker,
    handed to ``send`` in batches)."""

    def __init__(self) -> None:
        self.pending: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.path: Path | None = None
        self.send = None  # a worker's runner.send_message, bound at start

    def open(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / ANSWERS
        self.path.write_text("")

    def add(self, line: dict[str, Any]) -> None:
        with self.lock:
            self.pending.append(line)

    def received(self, lines: list[dict[str, Any]]) -> None:
        """A batch from a worker."""
        with self.lock:
            self.pending.extend(lines)

    def flush(self) -> None:
        with self.lock:
            lines, self.pending = self.pending, []
        if not lines:
            return
        if self.send is not None:
            self.send(MESSAGE, lines)
        elif self.path is not None:
            with self.path.open("a") as out:
                out.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


JOURNAL = Journal()
