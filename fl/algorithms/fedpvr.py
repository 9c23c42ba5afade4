"""FedPVR (Li et al. 2022, "partial variance reduction"): SCAFFOLD's correction on the final layers only.

The classifier head (``model.head``: for VGG-11 the three FC layers; the authors' code corrects those and leaves
the 16 conv tensors alone) gets SCAFFOLD's option-II control variates; every other parameter takes plain SGD
steps (no momentum: the issue asks for plain SGD below the head; the FedPVR code uses momentum 0.9 there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.base import Context
from fl.algorithms.scaffold import Scaffold


@dataclass(frozen=True)
class FedPVR(Scaffold):
    """SCAFFOLD restricted to ``head_mask``; control variates are zero elsewhere and never sent."""

    name: ClassVar[str] = "fedpvr"

    def mask(self, ctx: Context) -> torch.Tensor | None:
        return ctx.head_mask.to(ctx.x.dtype)

    def correction(self, w: torch.Tensor, ctx: Context) -> torch.Tensor | None:
        return (ctx.server["c"] - ctx.client["c"]) * self.mask(ctx)

    def communication(self, n_params: int, n_head: int) -> int:
        return 2 * n_params + 2 * n_head
