"""Rank side of the toy pack: the only module of it a rank imports (through the zygote)."""

from __future__ import annotations

from typing import Any

import torch


def _double(student: Any, params: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = student.module("ops").double(tensors["x"])
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"double returned {type(out).__name__}, expected a torch.Tensor")
    return {"out": out}


BODIES = {"double": _double}
