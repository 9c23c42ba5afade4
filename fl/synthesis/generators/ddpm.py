"""Class-conditional denoising diffusion probabilistic model (DDPM), Fedssyn's local generator.

Fedssyn (fedssyn_neurips.txt §5) trains "DDPM [11] with the same architecture as [11]" on every client; [11] is
Ho, Jain & Abbeel, *Denoising Diffusion Probabilistic Models*, NeurIPS 2020 (arXiv:2006.11239). The pieces here,
with Ho et al.'s equation numbers (their t runs 1..T; in code the index ``t`` runs 0..T-1 and stands for t+1):

- Forward process, fixed variances β_1 < ... < β_T (linear from ``beta_start`` to ``beta_end`` as in Ho et al.
  §4, or the cosine schedule of Nichol & Dhariwal 2021, eq. 17, which the authors' code uses). With
  α_t = 1 − β_t and ᾱ_t = Π_{s≤t} α_s, eq. 4 gives q(x_t | x_0) in closed form,
  x_t = sqrt(ᾱ_t)·x_0 + sqrt(1 − ᾱ_t)·ε, ε ~ N(0, I): :meth:`DDPM.q_sample`.
- Training objective L_simple (eq. 14, Algorithm 1): E_{t, x_0, ε} ‖ε − ε_θ(x_t, t, y)‖² with t uniform over the
  T steps: :meth:`DDPM.loss`; :meth:`DDPM.fit` minimises it with Adam(W) over shuffled mini-batches and keeps an
  exponential moving average (EMA) of the weights, which is what :meth:`DDPM.sample` uses.
- Sampling (Algorithm 2): x_T ~ N(0, I), x_{t−1} = 1/sqrt(α_t)·(x_t − β_t/sqrt(1 − ᾱ_t)·ε_θ(x_t, t, y)) + σ_t z.
  It is computed in the equivalent form μ̃_t(x_t, x̂_0) (eq. 7) with x̂_0 = (x_t − sqrt(1 − ᾱ_t) ε_θ)/sqrt(ᾱ_t)
  clipped to [−1, 1] (``clip_denoised``, as in Ho et al.'s code); σ_t² = β_t (Ho et al.'s CIFAR-10 choice) or
  β̃_t = (1 − ᾱ_{t−1})/(1 − ᾱ_t)·β_t (``variance="posterior"``, the authors' code); no noise at the last step.
- Strided sampling with ``steps < T``: DDIM (Song, Meng & Ermon, *Denoising Diffusion Implicit Models*, ICLR 2021,
  eq. 12) on ``steps`` evenly spaced time indices from T−1 down to 0, with η = 0 (deterministic given x_T);
  η = 1 gives the stochastic, respaced DDPM chain that the authors' code runs with 250 steps.

The network ε_θ is a U-Net (:class:`UNet`) in the style of Ho et al. (Appendix B): residual blocks with GroupNorm
and SiLU, a sinusoidal time embedding passed through a 2-layer MLP, stride-2 convolutions down and nearest
up-sampling + convolution up, skip connections by concatenation, optional single-head self-attention, and a
zero-initialised output convolution. Class conditioning: a learned label embedding is added to the time embedding
(no classifier-free guidance). The embedding enters each residual block as the scale and shift of its second
GroupNorm ("adaptive group normalisation", Dhariwal & Nichol 2021) rather than Ho et al.'s per-channel addition
before it, which a GroupNorm with few channels per group largely cancels (tests: without it the tiny model
ignored its labels). Inputs whose size is not a multiple of 2^(levels − 1) (28 × 28 with three
down-samplings) are zero-padded to the next multiple and the prediction is cropped back.

Deviations and their knobs (:class:`DDPMConfig`): the CPU default is much smaller than the paper's network
(width 32, multipliers (1, 2), one residual block per level, no attention); :meth:`DDPMConfig.paper` is the
authors' recipe. The EMA decay is warmed up as min(ema, (1 + k)/(10 + k)) after k updates (``ema_warmup``) so that
short runs do not sample from an average dominated by the random initial weights; the authors' code uses a
constant decay. Gradients are clipped to norm ``grad_clip`` (Ho et al.: 1). GroupNorm uses at most 32 groups of at
least 4 channels (Ho et al. and the authors' code: 32 groups, i.e. 16 groups instead of 32 at the paper's width 64).

Randomness: the batch order, t and ε in training and every noise draw in sampling come from the
``torch.Generator`` passed in (drawn on its device, then moved); library code never seeds a global generator.
Initial weights come from torch's global generator (``torch.manual_seed`` before construction makes them
reproducible), as do dropout masks when ``dropout > 0``.

>>> cfg = DDPMConfig.tiny()
>>> model = DDPM((1, 28, 28), 2, cfg)
>>> float(model.alphas_cumprod[-1]) < 1e-3, model.sample([0, 1], torch.Generator().manual_seed(0), steps=2).shape
(True, (2, 1, 28, 28))
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fl.synthesis.generators.base import to_uint8, to_unit
from fl.synthesis.generators.dp import DPConfig, training
from theory.errors import InputError

__all__ = ["DDPM", "DDPMConfig", "UNet", "beta_schedule"]

SCHEDULES = ("linear", "cosine")
VARIANCES = ("beta", "posterior")
# Fields that fix the network and the diffusion process; a state dict only loads into a model that agrees on them.
_ARCH_FIELDS = (
    "timesteps",
    "beta_start",
    "beta_end",
    "schedule",
    "base_channels",
    "channel_mults",
    "num_res_blocks",
    "attn_levels",
)


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v: object) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclasses.dataclass(frozen=True)
class DDPMConfig:
    """Hyper-parameters of :class:`DDPM` (symbols of Ho et al. 2020 in brackets).

    timesteps: T, the number of diffusion steps (Ho et al. and Fedssyn: 1000).
    beta_start, beta_end: β_1 and β_T of the linear variance schedule (Ho et al.: 1e-4 and 0.02, for T = 1000;
        for a much smaller T scale both by 1000/T, otherwise ᾱ_T stays far from 0). Ignored by the cosine schedule.
    schedule: "linear" (Ho et al.) or "cosine" (Nichol & Dhariwal 2021, the authors' code): ᾱ_t = f(t)/f(0),
        f(t) = cos²((t/T + 0.008)/1.008 · π/2), β_t capped at 0.999.
    base_channels: U-Net width (Ho et al. CIFAR-10: 128; authors' code: 64; CPU default 32).
    channel_mults: width multiplier per resolution level; the image is down-sampled by 2 between levels
        (authors' code and Ho et al.: (1, 2, 2, 2)).
    num_res_blocks: residual blocks per level on the way down (one more on the way up; Ho et al.: 2, authors: 3).
    attn_levels: levels (0 = full resolution) with a self-attention layer after each residual block; any attention
        also puts one in the middle block (Ho et al.: (1,), i.e. 16×16; authors: (0, 1, 2), i.e. 32/16/8).
    dropout: dropout rate inside the residual blocks (Ho et al. and authors: 0.1).
    lr: learning rate of Adam(W) (Ho et al.: 2e-4; Fedssyn paper and authors' code: 1e-4).
    weight_decay: decoupled weight decay of AdamW (0 is Adam; authors' code: torch's AdamW default, 0.01).
    batch_size: mini-batch size in training and sampling (Ho et al.: 128; Fedssyn paper: 256).
    ema: decay of the exponential moving average of the weights used for sampling (Ho et al.: 0.9999; authors'
        code: 0.9995); 0 disables it and samples from the trained weights.
    ema_warmup: use min(ema, (1 + k)/(10 + k)) after k updates instead of a constant decay.
    grad_clip: clip the global gradient norm to this value (Ho et al.: 1); 0 disables clipping.
    variance: σ_t² of the reverse process: "beta" (σ_t² = β_t) or "posterior" (σ_t² = β̃_t).
    clip_denoised: clip the predicted x̂_0 to [−1, 1] at every sampling step.
    """

    timesteps: int = 1000
    beta_start: float = 1e-4
    beta_end: float = 0.02
    schedule: str = "linear"
    base_channels: int = 32
    channel_mults: tuple[int, ...] = (1, 2)
    num_res_blocks: int = 1
    attn_levels: tuple[int, ...] = ()
    dropout: float = 0.0
    lr: float = 2e-4
    weight_decay: float = 0.0
    batch_size: int = 128
    ema: float = 0.9995
    ema_warmup: bool = True
    grad_clip: float = 1.0
    variance: str = "beta"
    clip_denoised: bool = True

    def __post_init__(self) -> None:
        for name in ("channel_mults", "attn_levels"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                object.__setattr__(self, name, tuple(value))
            else:
                raise InputError(f"DDPMConfig.{name}: must be a tuple of integers, got {value!r}")
        ints = {"timesteps": 1, "base_channels": 1, "num_res_blocks": 1, "batch_size": 1}
        for name, low in ints.items():
            value = getattr(self, name)
            if not _is_int(value) or value < low:
                raise InputError(f"DDPMConfig.{name}: must be an integer >= {low}, got {value!r}")
        reals = ("beta_start", "beta_end", "lr", "weight_decay", "ema", "grad_clip", "dropout")
        for name in reals:
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value):
                raise InputError(f"DDPMConfig.{name}: must be a finite number, got {value!r}")
        if not 0 < self.beta_start <= self.beta_end < 1:
            raise InputError(
                f"DDPMConfig.beta_start/beta_end: need 0 < beta_start <= beta_end < 1, "
                f"got {self.beta_start!r}, {self.beta_end!r}"
            )
        if self.schedule not in SCHEDULES:
            raise InputError(f"DDPMConfig.schedule: must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.variance not in VARIANCES:
            raise InputError(f"DDPMConfig.variance: must be one of {', '.join(VARIANCES)}, got {self.variance!r}")
        if not self.channel_mults or not all(_is_int(m) and m >= 1 for m in self.channel_mults):
            raise InputError(
                f"DDPMConfig.channel_mults: must be a non-empty tuple of integers >= 1, got {self.channel_mults!r}"
            )
        levels = len(self.channel_mults)
        if not all(_is_int(k) and 0 <= k < levels for k in self.attn_levels):
            raise InputError(f"DDPMConfig.attn_levels: must be levels in [0, {levels}), got {self.attn_levels!r}")
        if self.lr <= 0:
            raise InputError(f"DDPMConfig.lr: must be > 0, got {self.lr!r}")
        if self.weight_decay < 0:
            raise InputError(f"DDPMConfig.weight_decay: must be >= 0, got {self.weight_decay!r}")
        if not 0 <= self.ema < 1:
            raise InputError(f"DDPMConfig.ema: must be in [0, 1), got {self.ema!r}")
        if self.grad_clip < 0:
            raise InputError(f"DDPMConfig.grad_clip: must be >= 0, got {self.grad_clip!r}")
        if not 0 <= self.dropout < 1:
            raise InputError(f"DDPMConfig.dropout: must be in [0, 1), got {self.dropout!r}")
        for name in ("ema_warmup", "clip_denoised"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"DDPMConfig.{name}: must be true or false, got {getattr(self, name)!r}")

    @classmethod
    def tiny(cls, **overrides: object) -> DDPMConfig:
        """A few-thousand-parameter model for tests: width 8, one level, T = 50 (β scaled by 1000/T = 20)."""
        values = dict(
            timesteps=50, beta_start=2e-3, beta_end=0.4, base_channels=8, channel_mults=(1,), lr=2e-3, batch_size=16
        )
        values.update(overrides)
        return cls(**values)

    @classmethod
    def paper(cls, **overrides: object) -> DDPMConfig:
        """Fedssyn's DDPM: T = 1000, lr 1e-4, batch 256 (paper text); the authors' code ("minimal-diffusion")
        for the rest: width 64, multipliers (1, 2, 2, 2), 3 residual blocks, attention at 32/16/8 (levels 0-2),
        dropout 0.1, cosine schedule, AdamW (weight decay 0.01), constant EMA 0.9995, posterior variance, no
        gradient clipping."""
        values = dict(
            timesteps=1000,
            schedule="cosine",
            base_channels=64,
            channel_mults=(1, 2, 2, 2),
            num_res_blocks=3,
            attn_levels=(0, 1, 2),
            dropout=0.1,
            lr=1e-4,
            weight_decay=0.01,
            batch_size=256,
            ema=0.9995,
            ema_warmup=False,
            grad_clip=0.0,
            variance="posterior",
        )
        values.update(overrides)
        return cls(**values)

    def to_dict(self) -> dict:
        """Plain python values (tuples as lists), loadable by ``torch.load(weights_only=True)``."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def beta_schedule(config: DDPMConfig) -> torch.Tensor:
    """β_1..β_T (float64) of ``config``'s schedule."""
    T = config.timesteps
    if config.schedule == "linear":
        return torch.linspace(config.beta_start, config.beta_end, T, dtype=torch.float64)
    s = 0.008
    steps = torch.arange(T + 1, dtype=torch.float64) / T
    f = torch.cos((steps + s) / (1 + s) * math.pi / 2) ** 2
    return (1 - f[1:] / f[:-1]).clamp(max=0.999)


# ----------------------------------------------------------------------------------------------------------------
# The U-Net ε_θ(x_t, t, y)


def _norm(channels: int) -> nn.GroupNorm:
    """GroupNorm with at most 32 groups of at least 4 channels each (1 group below 8 channels).

    Ho et al. use 32 groups at widths >= 128; at narrow widths 32 groups would be one channel each (instance
    norm), which erases every per-channel constant, e.g. the brightness of a flat image."""
    groups = max(1, min(32, channels // 4))
    while channels % groups:
        groups -= 1
    return nn.GroupNorm(groups, channels)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of the (float) time indices ``t`` (Vaswani et al. 2017, as in Ho et al.)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class _ResBlock(nn.Module):
    """GroupNorm, SiLU, conv; adaptive GroupNorm norm(h)·(1 + s) + b with (s, b) a linear map of the embedding;
    SiLU, dropout, zero-initialised conv; plus the (1x1-projected) input."""

    def __init__(self, cin: int, cout: int, emb_dim: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = _norm(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(emb_dim, 2 * cout)
        self.norm2 = _norm(cout)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        nn.init.zeros_(self.conv2.weight)
        nn.init.zeros_(self.conv2.bias)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        scale, shift = self.emb(F.silu(emb))[:, :, None, None].chunk(2, dim=1)
        h = self.norm2(h) * (1 + scale) + shift
        h = self.conv2(self.dropout(F.silu(h)))
        return self.skip(x) + h


class _Attention(nn.Module):
    """Single-head self-attention over the spatial positions, with a residual connection."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = _norm(channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = nn.Conv2d(channels, channels, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).transpose(-1, -2).unbind(1)
        out = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(out.transpose(-1, -2).reshape(b, c, h, w))


class _Block(nn.Module):
    """A residual block, optionally followed by self-attention."""

    def __init__(self, cin: int, cout: int, emb_dim: int, dropout: float, attention: bool) -> None:
        super().__init__()
        self.res = _ResBlock(cin, cout, emb_dim, dropout)
        self.attn = _Attention(cout) if attention else None

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        x = self.res(x, emb)
        return x if self.attn is None else self.attn(x)


class _Down(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class _Up(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class UNet(nn.Module):
    """ε_θ(x_t, t, y): a class-conditional U-Net that predicts the noise of ``x_t`` (see the module docstring).

    Level ℓ has width ``base_channels·channel_mults[ℓ]`` and ``num_res_blocks`` residual blocks down,
    ``num_res_blocks + 1`` up (each taking one skip connection); levels are separated by a stride-2 convolution
    (down) and a ×2 nearest up-sampling + convolution (up); the middle block is two residual blocks (with
    attention between them when ``attn_levels`` is not empty). The embedding of width 4·base is
    MLP(sinusoid(t)) + Embedding(y); each residual block turns it into the scale and shift of a GroupNorm.
    """

    def __init__(self, in_channels: int, n_classes: int, config: DDPMConfig) -> None:
        super().__init__()
        base, mults = config.base_channels, config.channel_mults
        self.multiple = 2 ** (len(mults) - 1)
        self.time_dim = 2 * ((base + 1) // 2)
        emb_dim = 4 * base
        self.time_mlp = nn.Sequential(nn.Linear(self.time_dim, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.label_emb = nn.Embedding(n_classes, emb_dim)
        self.conv_in = nn.Conv2d(in_channels, base, 3, padding=1)
        drop, attn = config.dropout, set(config.attn_levels)

        self.down = nn.ModuleList()
        skips, ch = [base], base
        for level, mult in enumerate(mults):
            for _ in range(config.num_res_blocks):
                self.down.append(_Block(ch, base * mult, emb_dim, drop, level in attn))
                ch = base * mult
                skips.append(ch)
            if level < len(mults) - 1:
                self.down.append(_Down(ch))
                skips.append(ch)

        self.mid1 = _ResBlock(ch, ch, emb_dim, drop)
        self.mid_attn = _Attention(ch) if attn else None
        self.mid2 = _ResBlock(ch, ch, emb_dim, drop)

        self.up = nn.ModuleList()
        for level in reversed(range(len(mults))):
            for _ in range(config.num_res_blocks + 1):
                self.up.append(_Block(ch + skips.pop(), base * mults[level], emb_dim, drop, level in attn))
                ch = base * mults[level]
            if level > 0:
                self.up.append(_Up(ch))

        self.norm_out = _norm(ch)
        self.conv_out = nn.Conv2d(ch, in_channels, 3, padding=1)
        nn.init.zeros_(self.conv_out.weight)
        nn.init.zeros_(self.conv_out.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x: (B, C, H, W) noisy images; t: (B,) time indices in [0, T); y: (B,) labels. Returns ε̂ like x."""
        height, width = x.shape[-2:]
        pad_h, pad_w = -height % self.multiple, -width % self.multiple
        if pad_h or pad_w:
            x = F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
        emb = self.time_mlp(timestep_embedding(t, self.time_dim)) + self.label_emb(y)
        h = self.conv_in(x)
        skips = [h]
        for module in self.down:
            h = module(h, emb) if isinstance(module, _Block) else module(h)
            skips.append(h)
        h = self.mid1(h, emb)
        if self.mid_attn is not None:
            h = self.mid_attn(h)
        h = self.mid2(h, emb)
        for module in self.up:
            h = module(torch.cat([h, skips.pop()], dim=1), emb) if isinstance(module, _Block) else module(h)
        out = self.conv_out(F.silu(self.norm_out(h)))
        if pad_h or pad_w:
            out = out[..., pad_h // 2 : pad_h // 2 + height, pad_w // 2 : pad_w // 2 + width]
        return out


# ----------------------------------------------------------------------------------------------------------------
# The diffusion model


class DDPM:
    """A class-conditional DDPM implementing :class:`fl.synthesis.generators.base.Generator`.

    ``in_shape`` = (C, H, W), ``n_classes`` ≥ 1; ``device`` holds the networks (the generators passed to
    :meth:`fit` and :meth:`sample` may live on the CPU). Schedule tensors (float64, CPU, index 0..T−1):
    ``betas`` (β_t), ``alphas`` (α_t), ``alphas_cumprod`` (ᾱ_t).
    """

    resumable = True  # state_dict(with_optimizer=True) is its whole training state (fl.synthesis.generators.base)

    def __init__(
        self,
        in_shape: Sequence[int],
        n_classes: int,
        config: DDPMConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        shape = tuple(in_shape)
        if len(shape) != 3 or not all(_is_int(s) and s >= 1 for s in shape):
            raise InputError(f"DDPM in_shape: must be (C, H, W) with positive integers, got {in_shape!r}")
        if not _is_int(n_classes) or n_classes < 1:
            raise InputError(f"DDPM n_classes: must be an integer >= 1, got {n_classes!r}")
        config = DDPMConfig() if config is None else config
        if not isinstance(config, DDPMConfig):
            raise InputError(f"DDPM config: must be a DDPMConfig, got {type(config).__name__}")
        self.in_shape: tuple[int, int, int] = tuple(int(s) for s in shape)  # type: ignore[assignment]
        self.n_classes = int(n_classes)
        self.config = config
        self.device = torch.device(device)
        self.model = UNet(self.in_shape[0], self.n_classes, config).to(self.device)
        self.ema_model: UNet | None = None
        if config.ema > 0:
            self.ema_model = copy.deepcopy(self.model).requires_grad_(False).eval()
        self.optimizer: torch.optim.Optimizer | None = None
        self.steps_done = 0  # optimiser steps so far (drives the EMA warm-up)
        self.epochs_done = 0  # passed to on_epoch, counting across fit calls

        self.betas = beta_schedule(config)
        self.alphas = 1 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, 0)
        prev = torch.cat([torch.ones(1, dtype=torch.float64), self.alphas_cumprod[:-1]])
        self.alphas_cumprod_prev = prev
        self.posterior_variance = self.betas * (1 - prev) / (1 - self.alphas_cumprod)  # β̃_t (0 at t index 0)
        # Coefficients of μ̃_t(x_t, x_0) = c0·x_0 + ct·x_t (Ho et al. eq. 7).
        self._coef_x0 = self.betas * prev.sqrt() / (1 - self.alphas_cumprod)
        self._coef_xt = (1 - prev) * self.alphas.sqrt() / (1 - self.alphas_cumprod)
        self._sqrt_ab = self.alphas_cumprod.sqrt().float().to(self.device)
        self._sqrt_1m_ab = (1 - self.alphas_cumprod).sqrt().float().to(self.device)

    # -- helpers ------------------------------------------------------------------------------------------------

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on the model's device; from the CPU to CUDA through pinned memory without waiting (a copy
        from pageable memory first waits for the stream, once per training step and twice per sampling step)."""
        if tensor.device == self.device:
            return tensor
        if self.device.type == "cuda" and tensor.device.type == "cpu":
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor.to(self.device)

    def _randn(self, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
        return self._to_device(torch.randn(tuple(shape), generator=generator, device=generator.device))

    def _check_labels(self, labels: np.ndarray | torch.Tensor | Sequence[int], what: str) -> torch.Tensor:
        arr = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
        if arr.ndim != 1:
            raise InputError(f"DDPM {what}: must be a 1-d array of class labels, got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise InputError(f"DDPM {what}: must be integers, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_classes):
            raise InputError(
                f"DDPM {what}: must lie in [0, {self.n_classes}), got values in [{arr.min()}, {arr.max()}]"
            )
        return torch.as_tensor(arr.astype(np.int64))

    # -- diffusion ----------------------------------------------------------------------------------------------

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor | int, noise: torch.Tensor) -> torch.Tensor:
        """x_t = sqrt(ᾱ_t)·x_0 + sqrt(1 − ᾱ_t)·ε (Ho et al. eq. 4); ``t``: time indices (B,) or one int."""
        t = torch.as_tensor(t, device=self._sqrt_ab.device, dtype=torch.long)
        if t.ndim == 0:
            t = t.expand(x0.shape[0])
        shape = (-1,) + (1,) * (x0.dim() - 1)
        a = self._sqrt_ab.to(x0.device)[t].view(shape).to(x0.dtype)
        s = self._sqrt_1m_ab.to(x0.device)[t].view(shape).to(x0.dtype)
        return a * x0 + s * noise

    def loss(self, x0: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """L_simple (Ho et al. eq. 14): mean over the batch and pixels of (ε − ε_θ(x_t, t, y))², t uniform.

        ``x0``: images in [−1, 1] on the model's device; t and then ε are drawn from ``generator``.
        """
        t = torch.randint(0, self.config.timesteps, (x0.shape[0],), generator=generator, device=generator.device)
        t = self._to_device(t)
        noise = self._randn(x0.shape, generator).to(x0.dtype)
        pred = self.model(self.q_sample(x0, t, noise), t, y)
        return F.mse_loss(pred, noise)

    # -- training -----------------------------------------------------------------------------------------------

    def _update_ema(self) -> None:
        if self.ema_model is None:
            return
        decay = self.config.ema
        if self.config.ema_warmup:
            decay = min(decay, (1 + self.steps_done) / (10 + self.steps_done))
        with torch.no_grad():
            ema = list(self.ema_model.parameters())
            torch._foreach_lerp_(ema, list(self.model.parameters()), 1.0 - decay)

    def fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        epochs: int,
        generator: torch.Generator,
        on_epoch: Callable[[int, DDPM], None] | None = None,
        privacy: DPConfig | None = None,
    ) -> list[dict[str, float]]:
        """Train on uint8 images ``x`` (n, C, H, W) with labels ``y`` (n,) for ``epochs`` passes.

        Each epoch visits a fresh permutation (from ``generator``) in mini-batches of ``batch_size`` (the last one
        may be smaller). Returns [{"loss": mean L_simple over the epoch's images}] per epoch and calls
        ``on_epoch(e, self)`` after each, with e the number of epochs trained so far (1, 2, ...; it keeps counting
        across calls to ``fit``). The optimiser state persists across calls.

        ``privacy``: DP-SGD instead (:mod:`~fl.synthesis.generators.dp`: Poisson batches, per-sample clipping
        replaces ``grad_clip``, noise; each epoch's record adds "epsilon", the ε spent in this call).
        """
        if not _is_int(epochs) or epochs < 0:
            raise InputError(f"DDPM fit epochs: must be an integer >= 0, got {epochs!r}")
        x_arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        if x_arr.dtype != np.uint8:
            raise InputError(f"DDPM fit x: must be uint8 images, got dtype {x_arr.dtype}")
        if x_arr.ndim != 4 or tuple(x_arr.shape[1:]) != self.in_shape or len(x_arr) == 0:
            want = ", ".join(map(str, self.in_shape))
            raise InputError(f"DDPM fit x: must have shape (n >= 1, {want}), got {x_arr.shape}")
        labels = self._check_labels(y, "fit y")
        if len(labels) != len(x_arr):
            raise InputError(f"DDPM fit: x has {len(x_arr)} images but y has {len(labels)} labels")
        data, labels = self._to_device(to_unit(x_arr)), self._to_device(labels)  # on the device once, not per batch
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(
                self.model.parameters(), lr=self.config.lr, weight_decay=self.config.weight_decay
            )
        n, bs = len(data), self.config.batch_size
        trainer = training(self.model, self.optimizer, n, bs, privacy, generator)
        history: list[dict[str, float]] = []
        self.model.train()
        try:
            with trainer:
                for _ in range(epochs):
                    total, seen = torch.zeros((), dtype=torch.float64, device=self.device), 0
                    for idx in trainer.batches(generator):
                        idx = self._to_device(idx)
                        loss = self.loss(data[idx], labels[idx], generator)
                        trainer.optimizer.zero_grad(set_to_none=True)
                        loss.backward()
                        if self.config.grad_clip > 0 and not trainer.private:
                            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
                        trainer.step()
                        self.steps_done += 1
                        self._update_ema()
                        total += loss.detach().double() * len(idx)  # summed on the device: no wait per step
                        seen += len(idx)
                    self.epochs_done += 1
                    history.append({"loss": float(total) / max(seen, 1)} | trainer.report())
                    if on_epoch is not None:
                        self.model.eval()
                        on_epoch(self.epochs_done, self)
                        self.model.train()
        finally:
            self.model.eval()
        return history

    # -- sampling -----------------------------------------------------------------------------------------------

    def _x0_eps(self, net: UNet, x: torch.Tensor, i: int, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x̂_0, ε̂) at time index i, x̂_0 clipped (and ε̂ made consistent with it) when ``clip_denoised``."""
        t = torch.full((x.shape[0],), i, device=x.device, dtype=torch.long)
        eps = net(x, t, y)
        ab = float(self.alphas_cumprod[i])
        x0 = (x - math.sqrt(1 - ab) * eps) / math.sqrt(ab)
        if self.config.clip_denoised:
            x0 = x0.clamp(-1, 1)
            eps = (x - math.sqrt(ab) * x0) / math.sqrt(1 - ab)
        return x0, eps

    def _ancestral(self, net: UNet, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Ho et al. Algorithm 2 over all T steps."""
        var = self.betas if self.config.variance == "beta" else self.posterior_variance
        for i in reversed(range(self.config.timesteps)):
            x0, _ = self._x0_eps(net, x, i, y)
            x = float(self._coef_x0[i]) * x0 + float(self._coef_xt[i]) * x
            if i > 0:
                x = x + math.sqrt(float(var[i])) * self._randn(x.shape, generator)
        return x

    def _ddim(
        self, net: UNet, x: torch.Tensor, y: torch.Tensor, steps: int, eta: float, generator: torch.Generator
    ) -> torch.Tensor:
        """Song et al. (DDIM) eq. 12 on ``steps`` evenly spaced time indices from T − 1 to 0."""
        T = self.config.timesteps
        times = [T - 1] if steps == 1 else np.linspace(0, T - 1, steps).round().astype(int).tolist()
        for j in reversed(range(len(times))):
            i = times[j]
            ab = float(self.alphas_cumprod[i])
            ab_prev = float(self.alphas_cumprod[times[j - 1]]) if j > 0 else 1.0
            x0, eps = self._x0_eps(net, x, i, y)
            sigma = eta * math.sqrt((1 - ab_prev) / (1 - ab) * (1 - ab / ab_prev))
            x = math.sqrt(ab_prev) * x0 + math.sqrt(max(1 - ab_prev - sigma**2, 0.0)) * eps
            if sigma > 0:
                x = x + sigma * self._randn(x.shape, generator)
        return x

    @torch.no_grad()
    def sample(
        self,
        labels: np.ndarray | Sequence[int],
        generator: torch.Generator,
        steps: int | None = None,
        eta: float = 0.0,
        use_ema: bool = True,
    ) -> np.ndarray:
        """uint8 images (m, C, H, W) of the classes ``labels`` (m,), generated in batches of ``batch_size``.

        ``steps`` None or T: the full ancestral chain (Algorithm 2); 1 <= steps < T: strided DDIM with ``eta``
        (0: deterministic given x_T). ``use_ema``: sample with the EMA weights (when ``ema > 0``).
        """
        y_all = self._check_labels(labels, "sample labels")
        T = self.config.timesteps
        steps = T if steps is None else steps
        if not _is_int(steps) or not 1 <= steps <= T:
            raise InputError(f"DDPM sample steps: must be an integer in [1, {T}], got {steps!r}")
        if not _is_real(eta) or not 0 <= eta <= 1:
            raise InputError(f"DDPM sample eta: must be in [0, 1], got {eta!r}")
        net = self.ema_model if use_ema and self.ema_model is not None else self.model
        was_training = net.training
        net.eval()
        out = [np.zeros((0, *self.in_shape), dtype=np.uint8)]
        try:
            for start in range(0, len(y_all), self.config.batch_size):
                y = self._to_device(y_all[start : start + self.config.batch_size])
                x = self._randn((len(y), *self.in_shape), generator)
                if steps == T:
                    x = self._ancestral(net, x, y, generator)
                else:
                    x = self._ddim(net, x, y, int(steps), float(eta), generator)
                out.append(to_uint8(x))
        finally:
            net.train(was_training)
        return np.concatenate(out)

    # -- checkpoints --------------------------------------------------------------------------------------------

    def state_dict(self, with_optimizer: bool = False) -> dict:
        """Weights (``model``, ``ema``), counters, shape and config as tensors and plain python values, loadable
        with ``torch.load(weights_only=True)``. ``with_optimizer`` adds the AdamW moments (to resume training)."""
        state = {
            "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
            "ema": {}
            if self.ema_model is None
            else {k: v.detach().cpu().clone() for k, v in self.ema_model.state_dict().items()},
            "in_shape": list(self.in_shape),
            "n_classes": self.n_classes,
            "config": self.config.to_dict(),
            "steps_done": self.steps_done,
            "epochs_done": self.epochs_done,
        }
        if with_optimizer and self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Load a :meth:`state_dict`; the shape, classes and architecture/schedule fields must match."""
        missing = {"model", "ema", "in_shape", "n_classes", "config"} - set(state)
        if missing:
            raise InputError(f"DDPM state dict: missing {sorted(missing)}")
        if tuple(state["in_shape"]) != self.in_shape or state["n_classes"] != self.n_classes:
            raise InputError(
                f"DDPM state dict: saved for in_shape {tuple(state['in_shape'])} and {state['n_classes']} classes, "
                f"this model has {self.in_shape} and {self.n_classes}"
            )
        mine = self.config.to_dict()
        differ = [k for k in _ARCH_FIELDS if state["config"].get(k) != mine[k]]
        if differ:
            raise InputError(f"DDPM state dict: config differs in {', '.join(differ)}")
        self.model.load_state_dict(state["model"])
        if self.ema_model is not None:
            self.ema_model.load_state_dict(state["ema"] or state["model"])
        self.steps_done = int(state.get("steps_done", 0))
        self.epochs_done = int(state.get("epochs_done", 0))
        if "optimizer" in state:
            self.optimizer = torch.optim.AdamW(
                self.model.parameters(), lr=self.config.lr, weight_decay=self.config.weight_decay
            )
            self.optimizer.load_state_dict(state["optimizer"])

    @classmethod
    def from_state_dict(cls, state: dict, device: str | torch.device = "cpu") -> DDPM:
        """A model built from the shape and config stored in ``state``, with its weights loaded."""
        try:
            config = DDPMConfig(**state["config"])
            model = cls(tuple(state["in_shape"]), int(state["n_classes"]), config, device)
        except (KeyError, TypeError) as exc:
            raise InputError(f"DDPM state dict: cannot rebuild the model ({exc})") from exc
        model.load_state_dict(state)
        return model
