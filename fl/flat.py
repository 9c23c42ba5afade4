"""A model whose parameters (and their gradients) are views into one flat vector each.

The algorithms of :mod:`fl.algorithms` are written on vectors w ∈ R^P; with the parameters living in one buffer,
loading the server model is one copy, a local step is one fused vector update, and autograd accumulates every
parameter's gradient straight into the flat gradient buffer.
"""

from __future__ import annotations

import torch
from torch import nn


class FlatModel:
    """Rebinds ``model``'s parameters to views of ``self.params`` and their ``.grad`` to views of ``self.grads``.

    ``head_mask`` marks the parameters of ``model.head`` (the classifier), which FedPVR treats differently.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        named = list(model.named_parameters())
        params = [p for _, p in named]
        self.layout = [(name, p.shape) for name, p in named]
        head = {id(p) for p in model.head.parameters()} if hasattr(model, "head") else set()
        self.params = torch.cat([p.detach().reshape(-1) for p in params])
        self.grads = torch.zeros_like(self.params)
        self.head_mask = torch.zeros(self.params.numel(), dtype=torch.bool, device=self.params.device)
        offset = 0
        for p in params:
            n = p.numel()
            p.data = self.params[offset : offset + n].view_as(p)
            p.grad = self.grads[offset : offset + n].view_as(p)
            self.head_mask[offset : offset + n] = id(p) in head
            offset += n

    @property
    def n_params(self) -> int:
        return self.params.numel()

    def load(self, vector: torch.Tensor) -> None:
        self.params.copy_(vector)

    def named(self, vector: torch.Tensor) -> dict[str, torch.Tensor]:
        """The model's parameters as named views of a flat ``vector`` (for ``torch.func.functional_call``: evaluate
        any parameter vector, e.g. a client's previous local model, without copying it into the model). A stack of
        vectors (m, P) gives stacked parameters (m, *shape): what :func:`fl.batched.train_groups` vmaps over."""
        out, offset = {}, 0
        for name, shape in self.layout:
            n = shape.numel()
            piece = vector[..., offset : offset + n]
            out[name] = piece.view(shape) if vector.dim() == 1 else piece.unflatten(-1, shape)
            offset += n
        return out
