"""Metrics sink: one JSON line per record in <output_dir>/metrics.jsonl, mirrored to the run's trackers (TensorBoard,
MLflow, W&B: driver/trackers.py).
Each row carries its step, its kind and `time`, the wall clock (Unix seconds) when it was written: the ledger's
wall_s restarts from a checkpoint's, so only `time` tells how long a recovery took."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Sequence


ROW_FIELDS = ("step", "kind", "time")  # a metrics.jsonl row's own fields, beside its values


def keep_rows_through(path: Path, step: int) -> list[dict]:
    """Drop the JSON lines of `path` whose step is after `step` and return the rows kept. A file already within it
    (a finished run extended) is left as it is, not rewritten; a rewrite goes through a copy, so a kill mid-rewrite
    leaves the old file whole."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):  # a line cut off by a kill mid-write: never complete, dropped
        lines = lines[:-1] + ["\n"]
    kept = [(line, row) for line in lines if line.strip() if (row := json.loads(line))["step"] <= step]
    text = [line.rstrip("\n") + "\n" for line, _ in kept]
    if text != lines:
        write_whole(path, "".join(text))
    return [row for _, row in kept]


def write_whole(path: Path, text: str) -> None:
    """Write through a copy renamed into place: a kill mid-write leaves the old file (or none), never half of one."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


class MetricsSink:
    def __init__(self, output_dir: str | Path, keep_through_step: int | None = None) -> None:
        """keep_through_step: a resumed run's checkpoint step; rows after it are dropped, since the resumed run
        writes those steps again (the file stays monotone in step, one row per step and kind). The rows kept are
        `self.kept`, parsed once here (a resume reads its last train row and its evals from them)."""
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "metrics.jsonl"
        self.kept: list[dict] = []
        if keep_through_step is not None:
            self.kept = keep_rows_through(path, keep_through_step)
            keep_rows_through(self.dir / "samples.jsonl", keep_through_step)  # its steps are written again too
        self._file = path.open("a")
        self._trackers: list = []

    def log(self, step: int, kind: str, values: dict[str, float]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}
        self._file.write(json.dumps({"step": step, "kind": kind, "time": round(time.time(), 3), **clean}) + "\n")
        self._file.flush()
        for tracker in list(self._trackers):
            # a tracker is a mirror: its failure (a server down, a full disk) must not end the training it watches
            try:
                tracker.log(step, kind, clean)
            except Exception as e:  # noqa: BLE001
                self._trackers.remove(tracker)
                self._warn(tracker, f"stopped at step {step}", e)

    def log_samples(self, step: int, rows: list[dict]) -> None:
        """A few completions as text (samples.jsonl, one line each), mirrored to the trackers that take them."""
        if not rows:
            return
        with (self.dir / "samples.jsonl").open("a") as f:
            f.writelines(json.dumps({"step": step, **row}) + "\n" for row in rows)
        for tracker in list(self._trackers):
            try:
                tracker.log_samples(step, rows)
            except Exception as e:  # noqa: BLE001 - a mirror, as in log()
                self._trackers.remove(tracker)
                self._warn(tracker, f"stopped at step {step}", e)

    def mirror_to(self, trackers: Sequence) -> None:
        """Each tracker (log(step, kind, values), close(failed)) gets every row written from now on."""
        self._trackers = list(trackers)

    def close(self, failed: bool = False) -> None:
        """Idempotent: train() closes the sink before drawing the run's pictures, and again (failed, if it raised)
        in its finally; trackers mark their run finished or failed. Never raises: an error being handled (a role's
        death, which a restart answers) must not be replaced by a tracker's."""
        self._file.close()
        trackers, self._trackers = self._trackers, []
        for tracker in trackers:
            try:
                tracker.close(failed)
            except Exception as e:  # noqa: BLE001
                self._warn(tracker, "did not close", e)

    @staticmethod
    def _warn(tracker, what: str, e: Exception) -> None:
        tracking_note(f"{type(tracker).__name__.removesuffix('Tracker')} {what} ({first_line(e)})")


def first_line(e: BaseException) -> str:
    """An error's first line (at most 200 characters), or its type's name when it says nothing."""
    return str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__


def tracking_note(line: str) -> None:
    """The one line a tracker's trouble costs: training goes on, and metrics.jsonl has every row."""
    print(f"tracking: {line}; metrics.jsonl keeps every row", file=sys.stderr, flush=True)


def namespaced(prefix: str, values: dict) -> dict:
    """Metric keys as `prefix/name` (batch/, buffer/, ledger/, sync/); a key that already names its namespace
    (mismatch/abs_mean, correction/ess, the adaptive rules' reuse/capacity and trust/m2) keeps it."""
    return {k if "/" in k else f"{prefix}/{k}": v for k, v in values.items()}


def read_metrics(path: str | Path, kind: str | None = None) -> list[dict]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r for r in rows if kind is None or r["kind"] == kind]


def row_at(rows: list[dict], kind: str, step: int) -> dict:
    """The values of the last `kind` row of `step` in `rows` (read_metrics), without step, kind and time; {} if none."""
    found = [r for r in rows if r["kind"] == kind and r["step"] == step]
    return {k: v for k, v in found[-1].items() if k not in ROW_FIELDS} if found else {}
