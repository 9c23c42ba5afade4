"""FMDS and HFMDs (hfmds.txt Sec. 4, Algorithm 1, eq. 4-12, Sec. 6): model-inversion data, shared by all clients.

The model splits into a feature extractor and a classifier: z = f^e(w^e; x) (``model.features``), logits
q = f^d(w^d; z) (``model.classifier``). Before round t with t mod T_d = 0 (``period`` = 20; plain FedAvg before
the first synthesis) every participating client k, with the server model w^t fixed, synthesises
D̂_{k,syn}: it draws B_g (``n_synthetic`` = 100) real samples (x, y) of D_k, starts one x̂ per real sample from
N(0, I) (in the normalised input space) with the real sample's label, and takes T_g (``steps`` = 500) Adam steps
at ``lr`` = 0.02 on the pixels of x̂ only (eq. 12):

    L = CE(f(w; x̂), y) + KL( softmax(ẑ ⊙ m) ‖ softmax(z_h ⊙ m) ),   ẑ = f^e(x̂),
    z_h = (1 + μ) z − μ z̄_y   (eq. 10; HFMDs, μ = ``mu`` = 0.5; FMDS: μ = 0, z_h = z, eq. 9),
    m = ReLU(g),  g = ∂q^y/∂z at z_h   (the CAM of eq. 8; for a linear classifier g = W[y]).

The server pools the clients' sets (``pool`` = "replace": the pool is this synthesis's sets; "accumulate": every
synthesis so far) and every client downloads it (Algorithm 1, lines 7-8). From then on every local step takes a
batch of B real samples and B pool samples (``synthetic_batch_size``, 0: the training batch size B) and minimises
(eq. 6)

    α · CE(w; real batch) + (1 − α) · CE(w; pool batch),   α = ``alpha`` = 0.1,

with the algorithm's own step (FedProx, SCAFFOLD, FedDyn corrections compose unchanged). HFMDs' prototypes: during
local training client k accumulates the features of its real samples per class (under its evolving local model);
after training z_c^t is their mean and z̄_c^t = (1 − λ) z_c^t + λ z̄_c^{t−1} (``momentum`` λ = 0.5), kept on
the run's device for clients that have trained (state ``clients[k]``; a checkpoint restores them there too).

Choices the paper leaves open, with what we chose (../shared/notes/hfmds.md):
- Features become distributions for the KL through a softmax over the feature dimensions; the KL is KL(P̂ ‖ P)
  with P̂ from the synthetic features, as eq. 9 is written; the CAM g is detached (a fixed weighting).
- Eq. 11 is printed without the ReLU of eq. 9, but Fig. 6 calls μ = 0 "FMDS without the hard feature
  augmentation", which holds only if both use ReLU(g): ``cam_relu`` = true (false: eq. 11 as printed).
- "Δz = z̄ − z" in the text is a typo for eq. 10's z − z̄ (the printed eq. 10 is implemented).
- The prototype of a class the client has not trained on yet (a client whose first round is a synthesis round,
  or a class new to it): the mean feature of that class over the client's B_g drawn real samples under w^t.
  A class seen for the first time starts its momentum at z_c^t.
- A client with fewer than B_g samples inverts all of them (one x̂ per real sample).
- On CUDA the participants' inversions are one computation (:func:`invert_together`: their x̂ stacked, one Adam,
  the objective summed over the clients' means), each client's x̂ its inversion alone; on the CPU one client
  after another (:func:`inversion_parts`).
- Synthesis by the round's participants (the paper has all K clients active; with partial participation the
  others cannot compute). "replace" by default: Algorithm 1 line 5 overwrites D̂_{k,syn}.
- The privacy metric (Table 3): PSNR = 10 log10(MAX²/MSE) per synthetic sample against its paired real one,
  in pixel units: both images in the standardised domain the model sees, differences divided by each channel's
  data range (max − min of the real data: white − black), so MAX = 1 is one full pixel range, the paper's
  "maximum possible pixel value": the nominal 0-255 when each channel holds a 0 and a 255 pixel (random
  Fashion-MNIST subsets of 100 images do); a channel spanning only u_min..u_max would lower PSNR by
  20 log10(255 / (u_max − u_min)) dB. x̂ unclipped (``psnr_mean``), and x̂ clipped to the real data's [black,
  white] per channel, the image one can display (``psnr_clamped_mean``); identical images give +inf (reported as
  such; the mean is then inf). Also logged: the share of x̂'s values outside [black, white] and x̂'s 1/50/99%
  quantiles in pixel units (0 black, 1 white).

Reported, every round with a pool: each participant's share of its first mixed step's gradient that comes
from the pool, ‖g_p‖ / (‖g_r‖ + ‖g_p‖) with g_r = ∇α·CE(real), g_p = ∇(1 − α)·CE(pool), and the cosine of the two
(``pool_share``, ``pool_cosine`` in the round's log). Per synthesis, in the round's log and ``summary.json``:
seconds, the objective's first and last value, PSNR (mean, min, max), the pool's size, the numbers it costs (uploads
B_g·d per synthesising client, every one of the N clients downloads the pool; also added to the run's
communication), and FLOPs from ``torch.utils.flop_counter`` (one inversion step × T_g per client; one mixed local
step × steps against one real-only step). The run folder gets ``hfmds_pool.png`` (the last pool, a row per class).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fl.batched import padded_batches
from fl.methods.base import ClientRound, CyclicBatches, Extra, Method, Picture, ServerRound, require
from fl.methods.fedcog import kl_logs
from theory.errors import InputError

POOLS = ("replace", "accumulate")


def cam(classifier, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """g = ∂q^y/∂z (eq. 8) for every row of z, detached: the classifier acts row by row, so the gradient of the
    summed logits q^{y_j} gives each row's own."""
    z = z.detach().requires_grad_(True)
    with torch.enable_grad():
        logits = classifier(z)
        (g,) = torch.autograd.grad(logits.gather(1, y[:, None]).sum(), z)
    return g.detach()


def hard_features(z: torch.Tensor, prototypes: torch.Tensor, mu: float) -> torch.Tensor:
    """z_h = (1 + μ) z − μ z̄_y (eq. 10); ``prototypes`` holds z̄_y for each row of z."""
    return (1 + mu) * z - mu * prototypes


def update_prototypes(
    old: torch.Tensor | None, old_seen: torch.Tensor | None, sums: torch.Tensor, counts: torch.Tensor, momentum: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """z̄_c^t = (1 − λ) z_c^t + λ z̄_c^{t−1} for the classes seen this round (z_c^t = sums_c / counts_c), z_c^t
    for a class seen for the first time, the old prototype for a class not seen; returns (prototypes, seen), on the
    device and in the dtype of ``sums`` (the round's: kept ones may come from a checkpoint restored elsewhere)."""
    seen_now = counts > 0
    current = sums / counts.clamp_min(1)[:, None]
    if old is None:
        return torch.where(seen_now[:, None], current, torch.zeros_like(current)), seen_now
    old, old_seen = old.to(current.device, current.dtype), old_seen.to(current.device)
    mixed = torch.where(old_seen[:, None], (1 - momentum) * current + momentum * old, current)
    return torch.where(seen_now[:, None], mixed, old), seen_now | old_seen


def psnr(a: torch.Tensor, b: torch.Tensor, data_range: torch.Tensor | float) -> torch.Tensor:
    """PSNR in dB per sample (first axis) between image batches a and b: 10 log10(1 / MSE) of the differences
    divided by ``data_range`` (a number or one value per channel: MAX of the images), +inf for identical images."""
    scale = torch.as_tensor(data_range, dtype=a.dtype, device=a.device)
    if scale.ndim == 1:
        scale = scale.view(1, -1, *([1] * (a.ndim - 2)))
    mse = ((a - b) / scale).pow(2).flatten(1).mean(1)
    return 10 * torch.log10(1 / mse)  # mse = 0 gives +inf


def clamp(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """x clipped to [low, high] per channel (the displayable pixel range of the real data)."""
    shape = (1, -1, *([1] * (x.ndim - 2)))
    return torch.maximum(torch.minimum(x, high.view(shape)), low.view(shape))


def invert(
    model, x_real: torch.Tensor, y_real: torch.Tensor, prototypes: torch.Tensor, mu: float, steps: int, lr: float,
    generator: torch.Generator, cam_relu: bool = True,
) -> tuple[torch.Tensor, list[float]]:  # fmt: skip
    """One x̂ per real sample by ``steps`` Adam steps on the pixels of x̂ (eq. 12; μ = 0: FMDS, eq. 9), the model
    fixed, x̂ starting from N(0, 1) drawn from ``generator``; returns x̂ and the objective before each step.
    ``prototypes[j]``: z̄ of row j's class. One client of :func:`invert_together`."""
    start = torch.randn(x_real.shape, generator=generator, dtype=x_real.dtype).to(x_real.device)
    [(x_hat, losses)] = invert_together(model, [(x_real, y_real, prototypes, start)], mu, steps, lr, cam_relu)
    return x_hat, losses


def invert_together(
    model, clients: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]], mu: float, steps: int,
    lr: float, cam_relu: bool = True,
) -> list[tuple[torch.Tensor, list[float]]]:  # fmt: skip
    """Every client's inversion (x_real, y_real, prototypes, x̂'s start) as one computation: their x̂ stacked, one
    Adam over all pixels, the objective Σ_k (CE + KL means over client k's rows). The model is fixed and acts row by
    row, and Adam acts element by element, so each client's x̂ is its inversion alone (:func:`invert`) at a
    fraction of the launches; the losses of each step are read once at the end (no host read a step). Each client's
    (x̂, its objective before each step)."""
    model.eval()
    x_real = torch.cat([c[0] for c in clients])
    y_real = torch.cat([c[1] for c in clients])
    sizes = [len(c[1]) for c in clients]
    owner = torch.repeat_interleave(torch.arange(len(clients), device=y_real.device),
                                    torch.tensor(sizes, device=y_real.device))  # fmt: skip
    share = torch.tensor([1.0 / n for n in sizes], dtype=x_real.dtype, device=x_real.device)[owner]  # 1/n_k a row
    with torch.no_grad():
        z_h = hard_features(model.features(x_real), torch.cat([c[2] for c in clients]), mu)
    weight = cam(model.classifier, z_h, y_real)
    weight = F.relu(weight) if cam_relu else weight
    log_target = F.log_softmax(z_h * weight, 1)
    x_hat = torch.cat([c[3] for c in clients]).requires_grad_(True)
    optimiser = torch.optim.Adam([x_hat], lr=lr)
    losses = []
    for _ in range(steps):
        rows = objective_rows(model, x_hat, y_real, weight, log_target) * share
        (x_hat.grad,) = torch.autograd.grad(rows.sum(), x_hat)  # the pixels only: the model's gradients stay untouched
        optimiser.step()
        losses.append(rows.new_zeros(len(clients)).index_add_(0, owner, rows.detach()))
    per_step = torch.stack(losses).T.tolist() if losses else [[] for _ in clients]
    return [(x.detach(), log) for x, log in zip(x_hat.split(sizes), per_step)]


def inversion_parts(clients: list, device: torch.device) -> list[list]:
    """The clients' inversions as computations: on CUDA all in one (a client's 100 rows are a few µs of arithmetic a
    step, so one client at a time is bound by launches); on the CPU one client at a time, which is faster there and
    gives the x̂ of one by one, bit for bit (the logged objective to rounding: it is summed row by row)."""
    return [clients] if torch.device(device).type == "cuda" else [[client] for client in clients]


def objective_rows(model, x_hat, y, weight, log_target) -> torch.Tensor:
    """Each row's CE(f(x̂), y) + KL(softmax(ẑ ⊙ m) ‖ target) (eq. 12): :func:`objective` is their mean."""
    z_hat = model.features(x_hat)
    matching = kl_logs(F.log_softmax(z_hat * weight, 1), log_target)
    return F.cross_entropy(model.classifier(z_hat), y, reduction="none") + matching


def objective(model, x_hat, y, weight, log_target) -> torch.Tensor:
    """CE(f(x̂), y) + KL(softmax(ẑ ⊙ m) ‖ target), means over the batch (eq. 12)."""
    return objective_rows(model, x_hat, y, weight, log_target).mean()


@dataclass
class Mixed:
    """One client's objective for one round (eq. 6): α·CE(real batch) + (1 − α)·CE(next pool batch) once a pool
    exists (plain CE before), accumulating the real batches' features per class when ``prototypes`` is on. A
    :class:`~fl.methods.base.BatchedTask`: the batched backend trains it with the other clients at once."""

    n_classes: int
    alpha: float = 1.0
    pool: tuple[torch.Tensor, torch.Tensor] | None = None
    batches: CyclicBatches | None = None
    prototypes: bool = False
    sums: torch.Tensor | None = field(default=None, repr=False)
    counts: torch.Tensor | None = field(default=None, repr=False)
    share: dict | None = None

    def loss(self, model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.pool is None:
            z = model.features(x)
            self.accumulate(z.detach(), y)
            return F.cross_entropy(model.classifier(z), y)
        batch = self.batches.next()  # one forward pass over [real; synthetic] (no batch statistics in our models)
        z = model.features(torch.cat([x, self.pool[0][batch]]))
        self.accumulate(z[: len(y)].detach(), y)
        logits = model.classifier(z)
        real, synthetic = F.cross_entropy(logits[: len(y)], y), F.cross_entropy(logits[len(y) :], self.pool[1][batch])
        if self.share is None:  # the round's first step: how much of the mixed gradient the pool contributes
            self.share = gradient_share(model, self.alpha * real, (1 - self.alpha) * synthetic)
        return self.alpha * real + (1 - self.alpha) * synthetic

    # the batched backend's form of this objective (fl.methods.base.BatchedTask)
    @property
    def extra_width(self) -> int:
        return self.batches.batch_size if self.pool is not None else 0

    @property
    def feature_classes(self) -> int:
        return self.n_classes if self.prototypes else 0

    def extra(self, steps: int) -> Extra | None:
        """The pool batches of ``steps`` steps, drawn as :meth:`loss` draws them (the last of a pass may be
        smaller: padded, mask 0)."""
        if self.pool is None:
            return None
        batches = [self.batches.next() for _ in range(steps)]
        index, mask = padded_batches(batches, self.extra_width, self.pool[1].device)
        weights = (self.alpha, 1 - self.alpha)
        return Extra(*self.pool, index, mask.to(self.pool[0].dtype), weights, share=self.share is None)

    def take(self, sums: torch.Tensor | None, counts: torch.Tensor | None, share: dict | None) -> None:
        self.sums, self.counts = sums, counts
        self.share = share if share is not None else self.share

    def accumulate(self, z: torch.Tensor, y: torch.Tensor) -> None:
        if not self.prototypes:
            return
        if self.sums is None:
            self.sums = torch.zeros(self.n_classes, z.shape[1], dtype=z.dtype, device=z.device)
            self.counts = torch.zeros(self.n_classes, dtype=z.dtype, device=z.device)
        self.sums.index_add_(0, y, z)
        self.counts.index_add_(0, y, torch.ones_like(y, dtype=z.dtype))


def gradient_share(model, real: torch.Tensor, pool: torch.Tensor) -> dict:
    """The two terms of the mixed step's gradient (eq. 6), g_r = ∇α·CE(real) and g_p = ∇(1 − α)·CE(pool):
    ``pool_share`` = ‖g_p‖ / (‖g_r‖ + ‖g_p‖) and their cosine (the graph is kept for the step's own backward)."""
    params = [p for p in model.parameters() if p.requires_grad]
    g_r = torch.cat([g.reshape(-1) for g in torch.autograd.grad(real, params, retain_graph=True)])
    g_p = torch.cat([g.reshape(-1) for g in torch.autograd.grad(pool, params, retain_graph=True)])
    n_r, n_p = float(g_r.norm()), float(g_p.norm())
    return {"pool_share": n_p / max(n_r + n_p, 1e-300), "cosine": float(F.cosine_similarity(g_r, g_p, dim=0))}


def count_flops(fn) -> int:
    """FLOPs of ``fn()`` (forward and backward passes inside it) by ``torch.utils.flop_counter``."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


@dataclass(frozen=True)
class HFMDs(Method):
    """period: T_d, rounds between syntheses (20). n_synthetic: B_g per client (100). steps: T_g (500). lr: Adam
    step size on the pixels (0.02). mu: μ of eq. 10 (0.5; −0.5: the easy-feature ablation of Table 4).
    momentum: λ of the prototype update (0.5). alpha: α of eq. 6 (0.1). pool: "replace" or "accumulate".
    synthetic_batch_size: pool samples per local step (0: the training batch size B). cam_relu: ReLU on the
    CAM in eq. 11 as in eq. 9 (true)."""

    name: ClassVar[str] = "hfmds"
    not_distributed: ClassVar[str] = (
        "its clients' inversion runs in before_round, a server hook here that reads their data (not yet split into "
        "a client message)"
    )
    period: int = 20
    n_synthetic: int = 100
    steps: int = 500
    lr: float = 0.02
    mu: float = 0.5
    momentum: float = 0.5
    alpha: float = 0.1
    pool: str = "replace"
    synthetic_batch_size: int = 0
    cam_relu: bool = True

    def check(self) -> HFMDs:
        require(self.period >= 1, "period", "T_d must be >= 1")
        require(self.n_synthetic >= 1, "n_synthetic", "B_g must be >= 1")
        require(self.steps >= 0, "steps", "T_g must be >= 0")
        require(self.lr > 0, "lr", "must be > 0")
        require(math.isfinite(self.mu), "mu", "must be a finite number")
        require(0 <= self.momentum <= 1, "momentum", "λ must lie in [0, 1]")
        require(0 <= self.alpha <= 1, "alpha", "α must lie in [0, 1]")
        require(self.pool in POOLS, "pool", f"must be one of {', '.join(POOLS)}")
        require(self.synthetic_batch_size >= 0, "synthetic_batch_size", "must be >= 0 (0: the training batch size)")
        return self

    @property
    def uses_prototypes(self) -> bool:
        return self.mu != 0

    def first_stateful_round(self) -> int:
        return 1 if self.uses_prototypes else self.period

    def shares_state_with(self, other: Method, next_round: int) -> bool:
        """Before its first synthesis (round ``period``) HFMDs' state is the class prototypes alone, kept during
        local training without a pool: α, μ's value, the inversion's settings and the pool's use do not reach it
        until then, so another HFMDs with the same λ (``momentum``) and period kept this one's."""
        return (
            type(other) is type(self)
            and self.uses_prototypes
            and other.uses_prototypes
            and (other.momentum, other.period) == (self.momentum, self.period)
            and next_round <= self.period
        )

    def before_round(self, s: ServerRound) -> None:
        if s.t % self.period or not s.clients:
            return
        server, flat, data = s.state["server"], s.flat, s.data
        start, sets, logs = time.perf_counter(), [], []
        flat.load(s.x)
        flat.model.eval()
        channels = data.x.transpose(0, 1).flatten(1)
        low, high = channels.min(1).values, channels.max(1).values  # black and white of each channel
        data_range, spread = high - low, []
        clients = []
        for k in s.clients:  # client k's own draws: seeded by (round seed, k)
            generator = torch.Generator().manual_seed(int(np.random.SeedSequence([s.seed, k]).generate_state(1)[0]))
            train = data.train[k]
            pick = train[torch.randperm(len(train), generator=generator)[: self.n_synthetic].to(train.device)]
            x_real, y_real = data.x[pick], data.y[pick]
            prototypes = torch.zeros(len(y_real), flat.model.feature_dim, dtype=x_real.dtype, device=x_real.device)
            if self.uses_prototypes:
                client = s.state["clients"].get(k, {})
                prototypes = self.prototypes_for(client, flat.model, x_real, y_real, data.n_classes)[y_real]
            start_x = torch.randn(x_real.shape, generator=generator, dtype=x_real.dtype).to(x_real.device)
            clients.append((x_real, y_real, prototypes, start_x))
        settings = (self.mu, self.steps, self.lr, self.cam_relu)
        inverted = [out for part in inversion_parts(clients, data.x.device)
                    for out in invert_together(flat.model, part, *settings)]  # fmt: skip
        for (x_real, y_real, *_), (x_hat, losses) in zip(clients, inverted):
            sets.append((x_hat, y_real))
            logs.append((losses, psnr(x_hat, x_real, data_range), psnr(clamp(x_hat, low, high), x_real, data_range)))
            spread.append(((x_hat - low.view(1, -1, 1, 1)) / data_range.view(1, -1, 1, 1)).flatten())
        pool_x = torch.cat([x for x, _ in sets])
        pool_y = torch.cat([y for _, y in sets])
        if self.pool == "accumulate" and "pool_x" in server:
            pool_x, pool_y = torch.cat([server["pool_x"], pool_x]), torch.cat([server["pool_y"], pool_y])
        server["pool_x"], server["pool_y"], server["n_classes"] = pool_x, pool_y, data.n_classes
        d = int(np.prod(data.x.shape[1:]))
        numbers = sum(len(y) for _, y in sets) * d + data.n_clients * len(pool_y) * d
        values = torch.cat([v for _, v, _ in logs])
        clamped = torch.cat([v for _, _, v in logs])
        pixels = torch.cat(spread)  # x̂ in pixel units: 0 = black, 1 = white
        record = {
            "round": s.t,
            "seconds": time.perf_counter() - start,
            "loss_first": float(np.mean([losses[0] for losses, *_ in logs if losses] or [np.nan])),
            "loss_last": float(np.mean([losses[-1] for losses, *_ in logs if losses] or [np.nan])),
            "psnr_mean": float(values.mean()),
            "psnr_min": float(values.min()),
            "psnr_max": float(values.max()),
            "psnr_clamped_mean": float(clamped.mean()),
            "pixels_outside": float(((pixels < 0) | (pixels > 1)).double().mean()),
            "pixels_quantiles": [
                float(q)
                for q in torch.quantile(
                    pixels.double().cpu()[:: max(1, len(pixels) // 100_000)],
                    torch.tensor([0.01, 0.5, 0.99], dtype=torch.float64),
                )
            ],
            "pool_size": len(pool_y),
            "numbers_sent": numbers,
            **self.flops(flat.model, sets[0], data, pool_x, pool_y),
        }
        server["syntheses"] = [*server.get("syntheses", []), record]
        s.log["synthesis"] = record
        s.log["numbers_sent"] = numbers

    def prototypes_for(self, client: dict, model, x_real: torch.Tensor, y_real: torch.Tensor, n_classes: int):
        """z̄_c for every class: the client's kept prototypes, else the class mean of its drawn real features."""
        with torch.no_grad():
            z = model.features(x_real)
        counts = torch.zeros(n_classes, dtype=z.dtype, device=z.device).index_add_(0, y_real, torch.ones_like(z[:, 0]))
        sums = torch.zeros(n_classes, z.shape[1], dtype=z.dtype, device=z.device).index_add_(0, y_real, z)
        fallback = sums / counts.clamp_min(1)[:, None]
        if "prototypes" not in client:
            return fallback
        kept, seen = client["prototypes"].to(z.device), client["seen"].to(z.device)
        return torch.where(seen[:, None], kept, fallback)

    def flops(self, model, first: tuple[torch.Tensor, torch.Tensor], data, pool_x, pool_y) -> dict:
        """FLOPs of one inversion step of the first client and of one local step with and without a pool batch
        (batch B = ``synthetic_batch_size`` or 64 samples of each), by torch.utils.flop_counter, on a copy of the
        model (the run's gradients stay untouched)."""
        model = copy.deepcopy(model)
        x_hat, y = first
        weight = torch.ones(len(y), model.feature_dim, dtype=x_hat.dtype, device=x_hat.device)
        log_target = F.log_softmax(torch.zeros_like(weight), 1)
        probe = x_hat.clone().requires_grad_(True)
        step = count_flops(lambda: objective(model, probe, y, weight, log_target).backward())
        b = self.synthetic_batch_size or 64
        real_x, real_y = data.x[:b], data.y[:b]

        def local(mixed: bool) -> None:
            task = Mixed(data.n_classes, prototypes=self.uses_prototypes)
            if mixed:
                task.alpha, task.pool = self.alpha, (pool_x, pool_y)
                task.batches = CyclicBatches(min(b, len(pool_y)), b, torch.Generator(), pool_y.device)
            task.loss(model, real_x, real_y).backward()

        return {
            "flops_synthesis_per_client": step * self.steps,
            "flops_local_step_real": count_flops(lambda: local(False)),
            "flops_local_step_mixed": count_flops(lambda: local(True)),
            "flops_batch": b,
        }

    def before_client(self, c: ClientRound) -> Mixed | None:
        server = c.state["server"]
        if "pool_x" not in server and not self.uses_prototypes:
            return None
        task = Mixed(c.data.n_classes, prototypes=self.uses_prototypes)
        if "pool_x" in server:
            pool = (server["pool_x"], server["pool_y"])
            batch = self.synthetic_batch_size or c.local.batch_size
            task.alpha, task.pool = self.alpha, pool
            task.batches = CyclicBatches(len(pool[1]), batch, c.generator, pool[1].device)
        return task

    def after_client(self, c: ClientRound, y: torch.Tensor) -> None:
        task = c.task
        if task is not None and task.share is not None:  # per participant, at its first local step
            c.log["pool_share"] = [*c.log.get("pool_share", []), task.share["pool_share"]]
            c.log["pool_cosine"] = [*c.log.get("pool_cosine", []), task.share["cosine"]]
        if not self.uses_prototypes or task is None or task.sums is None:
            return
        old = c.state["clients"].get(c.i, {})
        prototypes, seen = update_prototypes(
            old.get("prototypes"), old.get("seen"), task.sums, task.counts, self.momentum
        )
        c.state["clients"][c.i] = {"prototypes": prototypes, "seen": seen}

    def real_weight(self, i: int, data, state: dict) -> float:
        return self.alpha if "pool_x" in state.get("server", {}) else 1.0

    def synthetic_weight(self, state: dict) -> float:
        return 1 - self.alpha if "pool_x" in state.get("server", {}) else 0.0

    def synthetic_set(self, state: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
        server = state.get("server", {})
        if "pool_x" not in server:
            return None
        return server["pool_x"], F.one_hot(server["pool_y"], server["n_classes"]).to(server["pool_x"].dtype)

    def report(self, info: dict, state: dict) -> dict:
        server = state.get("server", {})
        if "pool_x" not in server:
            return {"syntheses": []}
        syntheses = server["syntheses"]
        return {
            "syntheses": syntheses,
            "psnr_mean": float(np.mean([r["psnr_mean"] for r in syntheses])),
            "pool_numbers_sent": int(sum(r["numbers_sent"] for r in syntheses)),
            "seconds_synthesis": float(sum(r["seconds"] for r in syntheses)),
        }

    def pictures(self, state: dict) -> list[Picture]:
        server = state.get("server", {})
        if "pool_x" not in server:
            return []
        pool_x, pool_y = server["pool_x"].cpu(), server["pool_y"].cpu()
        values = pool_x.transpose(0, 1).flatten(1)[:, :1_000_000]  # per channel (torch.quantile's size limit)
        low, high = (values.quantile(q, dim=1).view(1, -1, 1, 1) for q in (0.01, 0.99))
        images = ((pool_x - low) / (high - low).clamp_min(1e-12)).clamp(0, 1).mul(255).round().to(torch.uint8)
        title = f"{self.name}: pool after round {server['syntheses'][-1]['round']} (1-99% range per channel)"
        return [Picture("hfmds_pool.png", images.numpy(), pool_y.numpy(), title)]


@dataclass(frozen=True)
class FMDS(HFMDs):
    """FMDS (Sec. 4.2, eq. 9): HFMDs without the hard-feature augmentation, μ = 0 (no prototypes)."""

    name: ClassVar[str] = "fmds"
    mu: float = 0.0

    def check(self) -> FMDS:
        super().check()
        if self.mu != 0:
            raise InputError("config method.mu: FMDS matches the real features (mu = 0); use method.name = 'hfmds'")
        return self
