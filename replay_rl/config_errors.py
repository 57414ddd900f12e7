"""Config errors as one line per problem naming the dotted field, and dotted `key=value` overrides."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError


class ConfigError(ValueError):
    """A config that cannot run. The message names the field (dotted path) and the fix, one line per problem."""


def apply_override(data: dict[str, Any], item: str, defaults: dict[str, Any] | None = None) -> None:
    """Set dotted.key=value in data. defaults: the config's defaults, as a dict. The section the value goes into,
    when data lacks it, starts with its default's own values (so `cluster.emulate.mu=2` keeps the default emulated
    W and T); not its subsections, nor a union's (`type`) fields, which another member would not take."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {item!r}: expected dotted.key=value, e.g. replay.capacity=84")
    node, default = data, defaults or {}
    *parents, leaf = key.strip().split(".")
    for depth, part in enumerate(parents, 1):
        default = default.get(part) if isinstance(default, dict) else None
        seed = isinstance(default, dict) and "type" not in default and depth == len(parents)
        node = node.setdefault(part, {k: v for k, v in default.items() if not isinstance(v, dict)} if seed else {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {item!r}: {part} is not a section")
    node[leaf] = parse_yaml(raw, f"--set {item!r}")


def parse_yaml(text: str, source: str) -> Any:
    """yaml.safe_load, but a syntax error is one line naming source:line:column."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: YAML syntax error: {problem}") from None


def format_validation_error(e: ValidationError, union_tags: set[str]) -> str:
    """One line per error. union_tags: the discriminator values of the config's unions (config.root derives them
    from the models), which pydantic puts in the path and a user does not write."""
    lines = []
    for err in e.errors():
        # drop pydantic's union-member names from the path: users write replay.delta, not replay.positive_bias.delta
        loc = ".".join(str(p) for p in err["loc"] if str(p) not in union_tags and not str(p).startswith("function-"))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            key = str(err["loc"][-1]) if err["loc"] else ""
            # YAML reads {share:0.2} as the key "share:0.2": a flow mapping needs a space after its colon
            msg = (f"unknown key; write `{key.split(':')[0]}: {key.split(':', 1)[1]}`, with a space after the colon"
                   if ":" in key else "unknown key; check the spelling with `replay-rl config`")
        got = err.get("input")
        shown = "" if err["type"] in ("extra_forbidden", "missing") or isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"config error: {loc + ': ' if loc else ''}{msg}{shown}")
    return "\n".join(lines)
