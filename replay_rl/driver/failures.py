"""How a run that cannot go on says so: RunFailed (one line naming the role and the cause) and error.log, which
keeps every restart's cause and the final failure with their whole tracebacks, remote ones included. No Ray."""

from __future__ import annotations

import sys
import threading
import traceback
from pathlib import Path


class RunFailed(RuntimeError):
    """The run cannot go on; the message is one line naming the role and the cause. `death` names an actor that
    died or hung (a learner rank, a shard past its restarts, a generator in a broadcast group, the weight board,
    the generator reports, the evaluator, or any role hung in a bounded phase): restarting every role from the
    newest checkpoint recovers that (run.max_restarts). Other causes (a rule that stalls, a failing reward) would
    recur. `where` is the dead run's placement, from which a failed restart names lost nodes. The exception it
    was raised from is its __cause__, which error.log shows in full."""

    def __init__(self, message: str, death: str | None = None, where: dict | None = None) -> None:
        super().__init__(message)
        self.death = death
        self.where = where or {}


def resume_hint(output_dir) -> str:
    return f"resume with run.resume_from=auto (newest checkpoint in {output_dir})"


def log_error(log: Path, headline: str, e: BaseException) -> str | None:
    """Append `headline` and e's whole traceback, its causes included, to `log`: appended, so that the causes of
    the restarts before a final failure stay beside it. Returns why it could not (a full disk), else None: a
    failure to write the log must not hide the failure it records."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"=== {headline}\n{''.join(traceback.format_exception(e))}\n")
    except OSError as written:
        return f"{log} could not be written ({written.strerror or written})"
    return None


def one_line(e: BaseException) -> str:
    """The root cause of a (possibly Ray-wrapped) exception, as one line."""
    cause = getattr(e, "cause", None) or e
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1] if text else ''}".strip()


def one_line_thread_errors(out: Path) -> None:
    """An exception no thread of the driver caught (a library's writer thread: TensorBoard's, on a full disk) is one
    line on stderr, its traceback in out/error.log, instead of a traceback on the terminal."""
    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or isinstance(args.exc_value, SystemExit):
            return
        name = args.thread.name if args.thread else "?"
        log = out / "error.log"
        where = log_error(log, f"thread {name} failed", args.exc_value) or f"traceback: {log}"
        print(f"a background thread ({name}) failed: {one_line(args.exc_value)} ({where})", file=sys.stderr,
              flush=True)
    threading.excepthook = hook
