"""The study's progress lines on stderr, one per run as it finishes, whichever trial ran it and in whatever order
trials finish: a thread of the study's driver watches the run folders (a Tune callback would be pickled into the
experiment's state, and would be a subclass)."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from replay_rl.metrics import read_metrics
from replay_rl.study.runs import extending, finished, load_run


@dataclass
class Progress:
    n: int                  # runs the study reports on
    left: int               # runs still to train
    i: int = 0              # runs reported so far
    trained: int = 0        # runs trained by this driver
    t0: float = field(default_factory=time.perf_counter)

    def done(self, task: str, name: str, seed: int, cfg, run: dict, how: str) -> None:
        self.i += 1
        so_far = time.perf_counter() - self.t0
        restarted = f" after {k} restart{'s' * (k > 1)} from a death" if (k := run.get("run_restarts", 0)) else ""
        print(f"[{self.i}/{self.n}] {task} {name} lr {cfg.learner.lr:g} seed {seed}: {how}{restarted}, "
              f"pass@1 {run['pass@1'][0]:.3f} → {run['pass@1'][-1]:.3f}, compute {run['compute'][-1]:.0f}; "
              f"{so_far / 60:.1f} min so far, ~{so_far / max(self.trained, 1) * self.left / 60:.1f} min left",
              file=sys.stderr, flush=True)


class Watch:
    """While a phase runs, a line for each of its runs as its folder shows it finished (polled every `every_s`)."""

    def __init__(self, progress: Progress, runs: list[tuple[str, str, int, object]], every_s: float = 2.0) -> None:
        self.progress, self.every_s = progress, every_s
        self.pending = [(task, name, seed, cfg, extending(cfg)) for task, name, seed, cfg in runs]
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True, name="study-progress")

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()
        self._check()  # the runs that finished since the last poll

    def _poll(self) -> None:
        while not self.stopped.wait(self.every_s):
            self._check()

    def _check(self) -> None:
        for entry in list(self.pending):
            task, name, seed, cfg, short_of = entry
            try:
                run = load_run(cfg) if finished(cfg) else None
            except (OSError, ValueError, KeyError, IndexError):  # a folder being written: the next poll reads it
                continue
            if run is None:
                continue
            self.pending.remove(entry)
            self.progress.trained += 1
            self.progress.left -= 1
            rows = read_metrics(Path(cfg.run.output_dir) / "metrics.jsonl")  # its wall clock, from its own rows
            since = [r["time"] for r in rows if r["step"] > (short_of or -1)]
            how = f"{cfg.run.steps} steps in {since[-1] - since[0]:.0f} s" + (
                f" (extended from step {short_of})" if short_of else "")
            self.progress.done(task, name, seed, cfg, run, how)
