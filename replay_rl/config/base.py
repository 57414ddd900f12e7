"""The base of every config section: frozen, no unknown keys, field docstrings are the field descriptions."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _default_tags(cls, data: Any) -> Any:
        # a union section given without `type` means its default's type, at any depth, so `replay.capacity=84`
        # and `generation.backend.enforce_eager=true` just work
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, field in cls.model_fields.items():
            default_type = getattr(field.default, "type", None)
            if isinstance(data.get(name), dict) and "type" not in data[name] and isinstance(default_type, str):
                data[name] = {"type": default_type, **data[name]}
        return data
