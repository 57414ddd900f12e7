"""The config as a person reads it: every field with its value and description (`replay-rl config`), and the
check that no leaf field goes undocumented."""

from __future__ import annotations

import json
import textwrap
from typing import get_args

from pydantic import BaseModel

WIDTH = 110


def documented_tree(section: BaseModel, indent: int = 0) -> list[str]:
    """YAML lines of `section`'s values, each preceded by its description as a comment; valid YAML as a whole."""
    lines, pad = [], " " * indent
    for name, field in type(section).model_fields.items():
        value = getattr(section, name)
        if field.description:
            lines += [f"{pad}# {line}" for line in textwrap.wrap(" ".join(field.description.split()),
                                                                 max(40, WIDTH - indent - 2))]
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            lines += documented_tree(value, indent + 2)
        else:
            lines.append(f"{pad}{name}: {json.dumps(value if not isinstance(value, tuple) else list(value))}")
    return lines


def undocumented_fields(model: type[BaseModel]) -> list[str]:
    """Leaf fields without a description, over every variant of every union section, as Class.field."""
    missing, seen = [], set()

    def walk(m: type[BaseModel]) -> None:
        if m in seen:
            return
        seen.add(m)
        for name, field in m.model_fields.items():
            subs = _models_in(field.annotation)
            for sub in subs:
                walk(sub)
            if not subs and not field.description:
                missing.append(f"{m.__name__}.{name}")

    walk(model)
    return missing


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]
