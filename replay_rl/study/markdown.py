"""The compute-saved study's markdown: each task's headline paragraph, the savings-over-targets table with the end
slopes, the per-row and per-LR tables, the grid over N and the paper's findings (table.py computes them)."""

from __future__ import annotations


from replay_rl.study.table import PAPER_MU, fmt as _fmt


def n_grid_markdown(grid: dict) -> list[str]:
    if not grid:
        return []
    fracs = grid["fracs"]
    lines = ["", f"Grid over N at lr {grid['lr']:g}, the one LR every N row ran at (this ranks the Ns at one LR, not "
             "each N at its own best LR; each N's runs against the baseline frontier; compute saved to first reach "
             "each share of the baseline frontier's best):", "",
             "| config | N | seeds | " + " | ".join(f"saved % to {100 * float(f):.0f}% [90% CI]" for f in fracs) + " |",
             "|" + "---|" * (3 + len(fracs))]
    for name, row in grid["rows"].items():
        lines.append(f"| {name} | {row['capacity']} | {row['seeds']} | " + " | ".join(
            f"{_fmt(row[f]['saved_pct'], 0)} {_ci(row[f]['saved_pct_ci'], row[f]['censored_fraction'])}"
            for f in fracs) + " |")
    for f, c in grid["probe_check"].items():
        verdict = {True: "right (within 10 points)", False: "not right (more than 10 points below)",
                   None: "undecided (neither reaches the bar, or no other N)"}
        lines.append(f"\nProbe check at {100 * float(f):.0f}%: probe's N saves {_fmt(c['probe_saved_pct'], 0)}%, the "
                     f"grid's best ({c['grid_best']}) {_fmt(c['grid_best_saved_pct'], 0)}%: "
                     f"{verdict[c['probe_within_10_points']]}.")
    return lines





def _ci(ci: list, censored: float) -> str:
    lo, hi = ci
    # a censored jackknife replicate leaves a bound open: the config never reached (low), the baseline never (high)
    show = lambda b, open_as: open_as if b is None else f"{b:.0f}"  # noqa: E731
    return f"[{show(lo, 'not reached')}, {show(hi, 'unbounded')}]" + (f" ({100 * censored:.0f}% of replicates not reached)" if censored else "")



def headline_line(title: str, o: dict) -> str:
    """One comparison (buffer_frontier) as a paragraph: reach, compute saved with its interval, lower bars."""
    return (f"**{title}**, vs the baseline frontier at μ={PAPER_MU} ({o['rows']}; {o['labels']['buffer']} "
            f"against the baseline's {o['labels']['baseline']}): threshold {_fmt(o['threshold'], 3)} (98% of "
            f"the baseline frontier's best {_fmt(o['base_best'], 3)}), reached at compute "
            f"{_fmt(o['reach_cfg'], 0)} against {_fmt(o['reach_base'], 0)}: **compute saved "
            f"{_fmt(o['saved_pct'], 0)}%** {_ci(o['saved_pct_ci'], o['censored_fraction'])}, 90% jackknife-t over "
            f"seeds; buffer ahead or tied at {100 * o['budgets_ahead_fraction']:.0f}% of budgets (largest lead "
            f"{o['max_lead']:+.3f}). To first reach a lower bar: " +
            "; ".join(f"{100 * float(f):.0f}% of the best ({_fmt(a['threshold'], 3)}): "
                      f"{_fmt(a['saved_pct'], 0)}% {_ci(a['saved_pct_ci'], a['censored_fraction'])}"
                      for f, a in o["saved_at"].items()) + ".")



def targets_markdown(o: dict, every: float = 0.02) -> list[str]:
    """The savings-over-targets table (every `every` of accuracy) and the end slopes, each side at its best LR."""
    if not o or not o.get("targets"):
        return []
    lines = [f"Extended to a longer budget: {', '.join(f'{n} at lr {lrs}' for n, lrs in o['extended'].items())}; "
             "past the other runs' end each side's frontier covers these LRs only.", ""] if o.get("extended") else []
    fixed = {t["target"]: t for t in o.get("fixed_lr", {}).get("targets", [])}
    lines += ["Compute saved to first reach each accuracy target, two ways (90% jackknife-t intervals): the LR "
              "frontier (each side's best LR at each budget, chosen on held-out seeds) and one fixed LR a side (the "
              "LR best at the end of the budget, for the whole curve):", "",
              "| target | baseline reaches at | buffer reaches at | saved %, LR frontier [90% CI] | "
              "saved %, one fixed LR a side [90% CI] |", "|---|---|---|---|---|"]
    for t in o["targets"]:
        if abs(t["target"] / every - round(t["target"] / every)) < 1e-6:
            f = fixed.get(t["target"])
            own = f"{_fmt(f['saved_pct'], 0)} {_ci(f['saved_pct_ci'], f['censored_fraction'])}" if f else "–"
            lines.append(f"| {t['target']:.2f} | {_fmt(t['reach_base'], 0)} | {_fmt(t['reach_cfg'], 0)} | "
                         f"{_fmt(t['saved_pct'], 0)} {_ci(t['saved_pct_ci'], t['censored_fraction'])} | {own} |")
    for name, sl in o.get("end_slopes", {}).items():
        lo, hi = sl["ci"]
        ci = f" [{lo:+.3f}, {hi:+.3f}]" if lo is not None else ""
        lines.append(f"{'' if name == 'buffer' else chr(10)}End slope, {name} at its best LR ({sl['label']}): "
                     f"{sl['per_doubling']:+.3f} accuracy per doubling of compute over its last doubling{ci} "
                     f"({sl['seeds']} seeds).")
    rising = [n for n, sl in o.get("end_slopes", {}).items() if sl["ci"][0] is not None and sl["ci"][0] > 0]
    if rising:
        lines.append(f"\nStill rising at the end of the budget: {', '.join(rising)}. \"98% of the best\" then "
                     "depends on where the budget ends; the savings per target above are the statement to rely on.")
    return lines + [""]



def tasks_markdown(headlines: dict[str, dict], preset: str) -> str:
    """The study's front page: each task's headline side by side; the tables are in TASK/summary.md."""
    lines = [f"# Compute saved, `--preset {preset}`", ""]
    for task, o in headlines.items():
        lines += [f"## {task} (tables: `{task}/summary.md`)", "",
                  headline_line("Headline", o) if o else
                  "not summarised: no finished baseline run" if o is None else "no buffer row ran", "",
                  *targets_markdown(o)]
    return "\n".join(lines)



def markdown(table: dict, headline: dict, pooled: dict, rows: list[dict], k: int, grid: dict | None = None) -> str:
    lines = []
    for title, o in (("Headline: the most-run (5,3) buffer row's LR frontier", headline),
                     ("Pooled: the best over every (5,3) row and LR (more labels than the baseline: favours the "
                      "buffer)", pooled)):
        if o:
            lines += [headline_line(title, o), "", *targets_markdown(o)]
    lines += ["| config | μ | N (N/B; how set) | sampler | LRs | best LR | final at best LR | saved %, the row's "
              "frontier over its LRs vs the baseline's [90% CI] | saved %, own best vs best [90% CI] | budgets ahead | overlap prev | since last use | "
              "replay ratio | entropy |", "|" + "---|" * 14]
    for name, t in table.items():
        lines.append(
            f"| {name} | {t['mu']:g} | {t['capacity']} ({t['n_over_b']:.2g}; {t.get('n_rule', '')}) | {t['sampler']} | "
            f"{', '.join(t['lrs'])} | "
            f"{t['best_lr']} | {_fmt(t['best_final_median'])} | {_fmt(t['saved_pct'], 0)} "
            f"{_ci(t['saved_pct_ci'], t['censored_fraction'])} | {_fmt(t['own_saved_pct'], 0)} "
            f"{_ci(t['own_saved_pct_ci'], t['own_censored_fraction'])} | {_fmt(t['budgets_ahead_fraction'])} | "
            f"{_fmt(t['best_overlap_prev_mean_median'])} | {_fmt(t['best_since_last_use_mean_median'], 1)} | "
            f"{_fmt(t['best_replay_ratio_median'])} | {_fmt(t['best_entropy_mean_median'], 3)} |")
    lines += ["", "Per learning rate (medians over seeds; saved % against the baseline frontier):", "",
              f"| config | LR | seeds | pass@1 start → final | pass@{k} | drawdown | saved % [90% CI] |",
              "|" + "---|" * 7]
    for name, t in table.items():
        for lr, d in t["by_lr"].items():
            lines.append(f"| {name} | {lr} | {d['seeds']} | {_fmt(d['start_median'])} → {_fmt(d['final_median'])} | "
                         f"{_fmt(d[f'final_pass@{k}_median'])} | {_fmt(d['drawdown_median'])} | "
                         f"{_fmt(d['saved_vs_base_frontier_pct'], 0)} "
                         f"{_ci(d['saved_vs_base_frontier_ci90'], d['censored_fraction'])} |")
    lines += n_grid_markdown(grid)
    lines += ["", "| finding | reproduced | numbers |", "|---|---|---|"]
    lines += [f"| {r['finding']} | {'yes' if r['reproduced'] else 'no'} | {r['numbers']} |" for r in rows]
    return "\n".join(lines) + "\n"

