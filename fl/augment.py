"""Differentiable image augmentation: DSA and the random crop + flip of local training.

DSA, differentiable siamese augmentation (Zhao and Bilen 2021, "Dataset condensation with differentiable siamese
augmentation"), transforms a batch (n, C, H, W) with operations that are differentiable in the images, so a loss
on augmented synthetic images has a gradient in the images. Its six groups, with the parameter ranges of DSA's
``ParamDiffAug`` (the ones DynaFed's code uses, strategy ``color_crop_cutout_flip_scale_rotate``):

- ``color``: brightness x + b, b ~ U(-0.5, 0.5); then saturation (x - x̄_C)·s + x̄_C, s ~ U(0, 2), x̄_C the mean
  over channels of each pixel (no effect on one channel); then contrast (x - x̄)·c + x̄, c ~ U(0.5, 1.5), x̄ the
  image's mean.
- ``crop``: an integer translation (dy, dx), each uniform in {-r..r}, r = round(0.125·H) (4 on 28 and 32 px);
  pixels shifted in from outside the image take ``fill``.
- ``cutout``: a square of side round(0.5·H) set to 0, its centre uniform over the image.
- ``flip``: a horizontal flip with probability 1/2.
- ``scale``: x and y scaled by s_x, s_y ~ U(1/1.2, 1.2) about the centre; ``rotate``: a rotation by
  θ ~ U(-15°, 15°); both resample bilinearly (``affine_grid`` + ``grid_sample``, ``align_corners = True``, zeros
  outside), as DSA does.

Parameters are drawn per image (DSA's ``batchmode = False``), from a ``torch.Generator`` passed in, so a run that
draws from its own seeded generator repeats bit for bit. :func:`dsa` follows DSA's single mode (``aug_mode = 'S'``,
the one DynaFed's code sets): each call picks one group uniformly and applies it. Every transform has identity
parameters (:func:`identity`) at which it returns its input.

:func:`crop_flip` is torchvision's ``RandomCrop(H, padding=4)`` + ``RandomHorizontalFlip()``, the training
augmentation of FedCOG's code: a translation in {-4..4}² with ``fill`` (black) shifted in, then a flip with
probability 1/2, on every image.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

GROUPS = ("color", "crop", "cutout", "flip", "scale", "rotate")
DSA_STRATEGY = "color_crop_cutout_flip_scale_rotate"  # DSA's and DynaFed's default
CROP_RATIO, CUTOUT_RATIO, SCALE_RATIO, ROTATE_DEGREES = 0.125, 0.5, 1.2, 15.0


def strategy_groups(strategy: str) -> tuple[str, ...]:
    """``"color_crop_..."`` -> ("color", "crop", ...); raises ValueError on an unknown group."""
    groups = tuple(g for g in strategy.split("_") if g)
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        raise ValueError(f"unknown DSA group(s) {unknown or [strategy]}; known: {', '.join(GROUPS)}")
    return groups


def _uniform(n: int, low: float, high: float, generator: torch.Generator) -> torch.Tensor:
    return torch.rand(n, generator=generator, dtype=torch.float64) * (high - low) + low


def crop_radius(size: int, ratio: float = CROP_RATIO) -> int:
    return int(size * ratio + 0.5)


def draw(group: str, n: int, shape: tuple[int, ...], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random parameters of ``group`` for n images of ``shape`` (C, H, W), drawn from ``generator`` (float64/int64
    on the CPU; :func:`apply` moves them)."""
    _, h, w = shape
    if group == "color":
        return {
            "brightness": _uniform(n, -0.5, 0.5, generator),
            "saturation": _uniform(n, 0.0, 2.0, generator),
            "contrast": _uniform(n, 0.5, 1.5, generator),
        }
    if group == "crop":
        r = crop_radius(h)
        return {"shift": torch.randint(-r, r + 1, (n, 2), generator=generator)}
    if group == "cutout":
        side = crop_radius(h, CUTOUT_RATIO)
        centre = torch.stack([torch.randint(0, size + (1 - side % 2), (n,), generator=generator) for size in (h, w)], 1)
        return {"centre": centre, "side": torch.full((n,), side)}
    if group == "flip":
        return {"flip": torch.rand(n, generator=generator) < 0.5}
    if group == "scale":
        return {"scale": _uniform(2 * n, 1 / SCALE_RATIO, SCALE_RATIO, generator).view(n, 2)}
    if group == "rotate":
        return {"angle": _uniform(n, -ROTATE_DEGREES, ROTATE_DEGREES, generator) * math.pi / 180}
    raise ValueError(f"unknown DSA group {group!r}")


def identity(group: str, n: int, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The parameters at which ``group`` returns its input (a cutout of side 0)."""
    return {
        "color": lambda: {"brightness": torch.zeros(n), "saturation": torch.ones(n), "contrast": torch.ones(n)},
        "crop": lambda: {"shift": torch.zeros(n, 2, dtype=torch.long)},
        "cutout": lambda: {"centre": torch.zeros(n, 2, dtype=torch.long), "side": torch.zeros(n, dtype=torch.long)},
        "flip": lambda: {"flip": torch.zeros(n, dtype=torch.bool)},
        "scale": lambda: {"scale": torch.ones(n, 2)},
        "rotate": lambda: {"angle": torch.zeros(n)},
    }[group]()


def _column(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return v.to(device=x.device, dtype=x.dtype).view(-1, 1, 1, 1)


def _affine(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta.to(device=x.device, dtype=x.dtype), list(x.shape), align_corners=True)
    return F.grid_sample(x, grid, align_corners=True)


def translate(x: torch.Tensor, shift: torch.Tensor, fill: float | torch.Tensor = 0.0) -> torch.Tensor:
    """out[i, :, r, c] = x[i, :, r + dy_i, c + dx_i] where that lies in the image, else ``fill`` (one value, or one
    per channel); differentiable in x (an index into the padded batch)."""
    n, channels, h, w = x.shape
    r = int(shift.abs().max()) if shift.numel() else 0
    fill = torch.as_tensor(fill, dtype=x.dtype, device=x.device).reshape(-1, 1, 1).expand(channels, 1, 1)
    inside = F.pad(torch.ones(1, 1, h, w, dtype=torch.bool, device=x.device), (r, r, r, r))
    padded = torch.where(inside, F.pad(x, (r, r, r, r)), fill)
    shift = shift.to(x.device)
    rows = (torch.arange(h, device=x.device) + r)[None, :] + shift[:, :1]
    cols = (torch.arange(w, device=x.device) + r)[None, :] + shift[:, 1:]
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    channel = torch.arange(channels, device=x.device)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]


def apply(group: str, x: torch.Tensor, params: dict[str, torch.Tensor], fill: float | torch.Tensor = 0.0):
    """``group`` with ``params`` (from :func:`draw` or :func:`identity`) on the batch x (n, C, H, W)."""
    if group == "color":
        x = x + _column(params["brightness"], x)
        mean = x.mean(1, keepdim=True)
        x = (x - mean) * _column(params["saturation"], x) + mean
        mean = x.mean((1, 2, 3), keepdim=True)
        return (x - mean) * _column(params["contrast"], x) + mean
    if group == "crop":
        return translate(x, params["shift"], fill)
    if group == "cutout":
        _, _, h, w = x.shape
        centre, side = params["centre"].to(x.device), params["side"].to(x.device)
        low = centre - side[:, None] // 2
        rows = torch.arange(h, device=x.device)[None, :]
        cols = torch.arange(w, device=x.device)[None, :]
        in_rows = (rows >= low[:, :1]) & (rows < low[:, :1] + side[:, None])
        in_cols = (cols >= low[:, 1:]) & (cols < low[:, 1:] + side[:, None])
        keep = ~(in_rows[:, :, None] & in_cols[:, None, :])
        return x * keep[:, None].to(x.dtype)
    if group == "flip":
        return torch.where(params["flip"].to(x.device).view(-1, 1, 1, 1), x.flip(3), x)
    if group == "scale":
        s = params["scale"]
        zero = torch.zeros_like(s[:, 0])
        theta = torch.stack([torch.stack([s[:, 0], zero, zero], 1), torch.stack([zero, s[:, 1], zero], 1)], 1)
        return _affine(x, theta)
    if group == "rotate":
        a = params["angle"]
        cos, sin, zero = torch.cos(a), torch.sin(a), torch.zeros_like(a)
        theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
        return _affine(x, theta)
    raise ValueError(f"unknown DSA group {group!r}")


def dsa(x: torch.Tensor, groups: tuple[str, ...], generator: torch.Generator) -> torch.Tensor:
    """One DSA call (single mode): one group of ``groups`` drawn uniformly, applied with per-image parameters."""
    group = groups[int(torch.randint(len(groups), (1,), generator=generator))]
    return apply(group, x, draw(group, len(x), tuple(x.shape[1:]), generator))


def crop_flip(x: torch.Tensor, generator: torch.Generator, fill: float | torch.Tensor = 0.0, pad: int = 4):
    """torchvision's RandomCrop(H, padding=pad) + RandomHorizontalFlip() on every image of the batch."""
    shift = torch.randint(-pad, pad + 1, (len(x), 2), generator=generator)
    flip = torch.rand(len(x), generator=generator) < 0.5
    return apply("flip", translate(x, shift, fill), {"flip": flip})
