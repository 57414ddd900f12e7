"""A tracker behind a bounded queue on a thread of its own: the driver never waits on a tracker's network or disk.
MLflow retries one call for up to ~20 min and a wedged network filesystem never answers; either used to hold the
training loop, or end a run that was recovering (a tracker that cannot start on a restart).

Bounds: a start waits tracking.timeout_s (a fresh run then stops in one line, before training; a resume or restart
drops the tracker in one line and goes on); a close waits as long again; rows beyond QUEUE_ROWS waiting are not
sent to it. metrics.jsonl, written by the driver itself, keeps every row whatever a tracker does."""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable

from replay_rl.config import ConfigError
from replay_rl.metrics import first_line, tracking_note

QUEUE_ROWS = 10_000  # rows waiting for a slow tracker before later ones skip it (a run logs a few a step)


class QueuedTracker:
    def __init__(self, name: str, start: Callable[[], object], timeout_s: float, fresh: bool) -> None:
        """name: as the lines say it (Mlflow, Wandb, TensorBoard). start: builds the tracker (on the thread).
        fresh: a run's first start, where a tracker that cannot start stops the run before it trains."""
        self.name, self.timeout_s, self.inner = name, timeout_s, None
        self._queue: queue.Queue = queue.Queue(QUEUE_ROWS)
        self._started, self._error, self._skipped = threading.Event(), None, 0
        self._thread = threading.Thread(target=self._work, args=(start,), daemon=True, name=f"tracker {name}")
        self._thread.start()
        if self._started.wait(timeout_s) and self._error is None:
            return
        why = first_line(self._error) if self._error else f"no answer in tracking.timeout_s={timeout_s:g}s"
        if fresh:
            raise ConfigError(f"tracking: {name} did not start ({why}); check tracking.mlflow_uri / wandb_mode, or "
                              f"drop {name.lower()} from tracking.loggers")
        self._thread = None  # left to finish or hang on its own (a daemon): nothing more is sent to it
        tracking_note(f"{name} did not start on this resume ({why}): dropped")

    def _work(self, start: Callable[[], object]) -> None:
        try:
            self.inner = start()
        except BaseException as e:  # noqa: BLE001 - told in one line by the constructor
            self._error = e
            return
        finally:
            self._started.set()
        failed = False
        while (item := self._queue.get()) is not None:  # a close is followed by None
            what, step, call = item
            try:
                if not failed:  # dropped: nothing more goes to it, its close included (as the sink did before)
                    call(self.inner)
            except Exception as e:  # noqa: BLE001 - a mirror: its failure must not end the training it watches
                failed = True
                tracking_note(f"{self.name} did not close ({first_line(e)})" if what == "close" else
                    f"{self.name} stopped at step {step} ({first_line(e)})")
            finally:
                self._queue.task_done()

    def idle(self) -> bool:
        """Nothing waiting for it or being logged now."""
        return self._queue.unfinished_tasks == 0

    def _send(self, step: int, call: Callable[[object], None]) -> None:
        if self._thread is None:
            return
        try:
            self._queue.put_nowait(("log", step, call))
        except queue.Full:
            self._skipped += 1
            if self._skipped == 1:
                tracking_note(f"{self.name} is {QUEUE_ROWS} rows behind: rows skip it until it catches up")

    def log(self, step: int, kind: str, values: dict) -> None:
        self._send(step, lambda t: t.log(step, kind, values))

    def log_rows(self, rows: list[tuple[int, str, dict]]) -> None:
        """A resume's history, (step, kind, values) each, as one item: however long, none of it is skipped."""
        self._send(rows[0][0] if rows else 0, lambda t: [t.log(*row) for row in rows])

    def log_samples(self, step: int, rows: list[dict]) -> None:
        self._send(step, lambda t: t.log_samples(step, rows))

    def close(self, failed: bool = False) -> None:
        """Marks the tracked run finished or failed once the rows before have gone, waiting tracking.timeout_s in
        all."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        deadline = time.monotonic() + self.timeout_s
        try:
            self._queue.put(("close", None, lambda t: t.close(failed)), timeout=self.timeout_s)
            self._queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
        except queue.Full:
            pass
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            tracking_note(f"{self.name} did not finish in tracking.timeout_s={self.timeout_s:g}s: its last rows may be "
                          "missing")
