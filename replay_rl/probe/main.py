"""`replay-rl probe` after its options are read (cli.py reads them): the bounded probe run, or the probe already
measured here, then the table and its files, and with --pilot the pilot over N. Returns the exit code: 0, 1 (the
probe fit no point in --time-limit), 2 (--pilot on a probe of another config), or the status's when the probe
cannot recommend (3: not_resolved, 4: premise_failed), so that a script never takes the table for a recommendation.
The driver's connect and train are handed in: the probe sits below the driver."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from replay_rl.config import RunConfig
from replay_rl.probe.settings import ProbeSettings


def run_probe(cfg: RunConfig, settings: ProbeSettings, folder: Path, config: Path | None, overrides: list[str], *,
              pilot: bool, max_capacity: int | None, pilot_steps: int | None, plan_only: bool,
              say: Callable[[str], None], warn: Callable[[str], None], driver: tuple) -> int:
    """say: stdout's lines (the table, the files); warn: stderr's (progress, refusals). A failed pilot arm raises
    pilot.ArmFailed, which the CLI turns into its one line."""
    from replay_rl.probe.pilot import pilot as run_pilot
    from replay_rl.probe.report import table
    from replay_rl.probe.run import ProbeTimeout, probe
    from replay_rl.probe.status import EXIT_CODES

    same = (None if config is None else str(config), overrides)
    if pilot and (folder / "probe.json").is_file():  # the pilot on the probe already measured here
        result = json.loads((folder / "probe.json").read_text())
        if (result.get("config"), result.get("overrides")) != same:
            warn(f"probe --pilot: {folder / 'probe.json'} was measured with other -c/-s: pass the same ones, or "
                 "another --out to probe this config first")
            return 2
    else:
        try:
            result, paths = probe(cfg, settings, folder, config, overrides, log=warn)
        except ProbeTimeout as e:
            warn(str(e))
            return 1
        say(table(result))
        say("files: " + ", ".join(str(p) for p in paths))
    if pilot:
        run_pilot(cfg, *same, result, folder / "pilot", max_capacity, pilot_steps, plan_only, say, warn,
                  driver=driver)
        return 0
    status = result["status"]["status"]
    return 0 if status == "ok" else EXIT_CODES[status]
