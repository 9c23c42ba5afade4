"""Classifiers for the federated-learning experiments, each split into a feature extractor and a classifier.

Every model is built as ``Model(in_shape, n_classes, ...)`` with ``in_shape = (C, H, W)`` and has two child
modules and nothing else: ``body`` (the feature extractor, ending in a flatten) and ``head`` (the classifier), so
that ``forward(x) == classifier(features(x)) == head(body(x))``, ``feature_dim`` is the width of the 2-d feature
tensor, and ``model.head.parameters()`` are exactly the classifier's parameters (FedPVR corrects only those;
HFMDs and FedCOG work on the features). Library code never seeds: the initial weights are a function of torch's
global generator, so ``torch.manual_seed`` before construction makes them reproducible.

- :class:`MLP` ("mlp"): the two-hidden-layer 200-unit ReLU network ("2NN") of McMahan et al. (2017), which
  DynaFed (dynafed.txt §6.3) uses as its MLP: "we choose ConvNet and MLP following [37, 56]".
- :class:`FedCOGCNN` ("fedcog-cnn"): FedCOG's "simple CNN that is frequently used in FL literature (Li et al.,
  2021a)" for Fashion-MNIST and CIFAR-10 (fedcog.txt, appendix "Models"): LeNet-style, conv 6/16, FC 120/84.
- :class:`HFMDsCNN` ("hfmds-cnn"): the HFMDs CNN (hfmds.txt §6, "Model architecture"): two 5x5 convolutions with
  2x2 max pooling, FC 1,600 -> 512 -> classes; the last FC layer is the classifier.
- :class:`ConvNet3` ("convnet3"): DynaFed's "ConvNet with 3 layers, and the hidden dimension is set to 128"
  (dynafed.txt, appendix), the dataset-distillation ConvNet: [conv3x3-128, instance norm, ReLU, avg-pool] x 3.
- :class:`VGG11` ("vgg11"): Fedssyn's "We use VGG-11 for all the experiments" (fedssyn_neurips.txt §5), without
  batch norm, as in the authors' code: 8 conv layers, then three FC layers (512-512-classes) that form the head.

:data:`MODELS` maps those names to the classes; :func:`build_model` builds one by name and raises
:class:`~theory.errors.InputError` for an unknown name, a bad argument or an image too small for the network.

>>> import torch
>>> model = build_model("fedcog-cnn", (1, 28, 28), 10)
>>> model(torch.zeros(2, 1, 28, 28)).shape, model.feature_dim, count_parameters(model)
(torch.Size([2, 10]), 84, 44426)
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence

import torch
from torch import nn

from fl.plugins import is_plugin, resolve
from theory import _validate
from theory.errors import InputError

__all__ = [
    "MLP",
    "MODELS",
    "VGG11",
    "ConvNet3",
    "FedCOGCNN",
    "HFMDsCNN",
    "SplitModel",
    "build_model",
    "count_parameters",
]

# A spatial layer as (kernel, padding) for a stride-1 convolution, or "pool" for a 2x2/stride-2 pooling.
_Layer = tuple[int, int] | str


def _in_shape(in_shape: Sequence[int]) -> tuple[int, int, int]:
    """``in_shape`` as a (C, H, W) tuple of positive ints, else InputError."""
    try:
        dims = tuple(in_shape)
    except TypeError:
        raise InputError(f"in_shape must be (C, H, W), got {in_shape!r}") from None
    if len(dims) != 3:
        raise InputError(f"in_shape must be (C, H, W), got {in_shape!r}")
    c, h, w = (_validate.count(name, v) for name, v in zip(("in_shape C", "in_shape H", "in_shape W"), dims))
    return c, h, w


def _spatial_out(size: int, layers: Sequence[_Layer]) -> int:
    """Side length after ``layers``; 0 when some layer would get an empty (or too small) input."""
    for layer in layers:
        if layer == "pool":
            size //= 2
        else:
            kernel, padding = layer
            size = size + 2 * padding - kernel + 1
        if size < 1:
            return 0
    return size


def _check_size(model: str, in_shape: tuple[int, int, int], layers: Sequence[_Layer]) -> tuple[int, int]:
    """Output (H, W) of the conv/pool stack; InputError naming the smallest usable side if it would be empty."""
    h, w = (_spatial_out(side, layers) for side in in_shape[1:])
    if h < 1 or w < 1:
        minimum = next(n for n in range(1, 1 << 16) if _spatial_out(n, layers) >= 1)
        raise InputError(f"{model} needs images of at least {minimum}x{minimum} pixels, got in_shape={tuple(in_shape)}")
    return h, w


def _two_conv_body(
    in_channels: int, channels: tuple[int, int], out_size: tuple[int, int], hidden: Sequence[int]
) -> nn.Sequential:
    """[conv5x5 -> ReLU -> maxpool2] x 2, flatten, then Linear + ReLU for each width in ``hidden``.

    ``out_size`` is the (h, w) left after the two conv/pool stages (from :func:`_check_size`).
    """
    layers: list[nn.Module] = []
    for c_in, c_out in zip((in_channels, channels[0]), channels):
        layers += [nn.Conv2d(c_in, c_out, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2)]
    layers.append(nn.Flatten())
    width = channels[1] * out_size[0] * out_size[1]
    for next_width in hidden:
        layers += [nn.Linear(width, next_width), nn.ReLU()]
        width = next_width
    return nn.Sequential(*layers)


class SplitModel(nn.Module):
    """Base class: ``forward(x) = classifier(features(x))`` with ``features = body`` and ``classifier = head``.

    Subclasses set ``self.body``, ``self.head`` and ``self.feature_dim`` and create no other child module or
    parameter, so the parameters of ``body`` and ``head`` partition the model's parameters.
    """

    body: nn.Module
    head: nn.Module

    def __init__(self, in_shape: Sequence[int], n_classes: int) -> None:
        super().__init__()
        self.in_shape: tuple[int, int, int] = _in_shape(in_shape)
        self.n_classes: int = _validate.count("n_classes", n_classes)
        self.feature_dim: int = 0

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The feature extractor: images ``(batch, C, H, W)`` -> features ``(batch, feature_dim)``."""
        if x.dim() != 4 or tuple(x.shape[1:]) != self.in_shape:
            raise InputError(
                f"{type(self).__name__} expects input of shape (batch, {', '.join(map(str, self.in_shape))}), "
                f"got {tuple(x.shape)}"
            )
        return self.body(x)

    def classifier(self, z: torch.Tensor) -> torch.Tensor:
        """The classifier: features ``(batch, feature_dim)`` -> logits ``(batch, n_classes)``."""
        return self.head(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def extra_repr(self) -> str:
        return f"in_shape={self.in_shape}, n_classes={self.n_classes}, feature_dim={self.feature_dim}"


class MLP(SplitModel):
    """Flatten -> Linear(C·H·W, hidden) -> ReLU -> Linear(hidden, hidden) -> ReLU | head Linear(hidden, classes).

    The "2NN" of McMahan et al. (2017) ("a simple multilayer-perceptron with 2-hidden layers with 200 units each
    using ReLu activations"), DynaFed's MLP ("following [37, 56]"). The features are the second hidden layer
    (``feature_dim = hidden``). DynaFed's released code uses ``hidden=128``.
    """

    def __init__(self, in_shape: Sequence[int], n_classes: int, hidden: int = 200) -> None:
        super().__init__(in_shape, n_classes)
        hidden = _validate.count("hidden", hidden)
        c, h, w = self.in_shape
        self.body = nn.Sequential(
            nn.Flatten(),
            nn.Linear(c * h * w, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
        )
        self.head = nn.Linear(hidden, self.n_classes)
        self.feature_dim = hidden


class FedCOGCNN(SplitModel):
    """FedCOG's simple CNN (LeNet-style, the NIID-Bench "simple CNN" of Li et al. 2021a).

    fedcog.txt, appendix "Models": "For Fashion-MNIST and CIFAR-10, we use a simple convolutional neural network
    (CNN) that is frequently used in FL literature (Li et al., 2021a). The data flow in this model is: 5×5
    convolution, max-pooling, 5×5 convolution, three fully-connected layer with hidden size of 120, 84 and 10".
    As in Li et al.'s code the second convolution is also followed by max-pooling::

        conv5x5(C->6) ReLU maxpool2, conv5x5(6->16) ReLU maxpool2, flatten (16·5·5 = 400 for 32x32,
        16·4·4 = 256 for 28x28), FC 120 ReLU, FC 84 ReLU  = features (dim 84) | head Linear(84, classes)

    FedCOG's different CIFAR-100 CNN (3x3 convolutions, FC 128) is not this class. Needs images of at least
    16x16 pixels.
    """

    _LAYERS: tuple[_Layer, ...] = ((5, 0), "pool", (5, 0), "pool")

    def __init__(self, in_shape: Sequence[int], n_classes: int) -> None:
        super().__init__(in_shape, n_classes)
        c = self.in_shape[0]
        h, w = _check_size(type(self).__name__, self.in_shape, self._LAYERS)
        self.body = _two_conv_body(c, (6, 16), (h, w), (120, 84))
        self.head = nn.Linear(84, self.n_classes)
        self.feature_dim = 84


class HFMDsCNN(SplitModel):
    """The HFMDs CNN, split where the paper splits it: only the last FC layer is the classifier.

    hfmds.txt §6, "Model architecture": "We adopt a convolutional neural network (CNN) model, which contains two
    5 × 5 convolutional layers followed by 2 × 2 max pooling layers and two fully connected layers with the
    latent dimensions of 1,600 and 512, respectively. We view the last fully connected layer as the classifier
    and the remaining layers as the feature extractor."

    So the two FC layers are Linear(1600, 512) and Linear(512, classes); the first belongs to the feature
    extractor (the features z the paper's CAM and feature matching act on are 512-d) and the head is the single
    Linear(512, classes). The paper gives no channel counts; 1,600 = 64·5·5 for 32x32 inputs with unpadded 5x5
    convolutions, so the channels are 32 and 64 (the McMahan et al. 2017 CIFAR CNN)::

        conv5x5(C->32) ReLU maxpool2, conv5x5(32->64) ReLU maxpool2, flatten (1600 for 32x32, 1024 for 28x28),
        FC 512 ReLU  = features (dim 512) | head Linear(512, classes)

    Needs images of at least 16x16 pixels.
    """

    _LAYERS: tuple[_Layer, ...] = ((5, 0), "pool", (5, 0), "pool")

    def __init__(self, in_shape: Sequence[int], n_classes: int) -> None:
        super().__init__(in_shape, n_classes)
        c = self.in_shape[0]
        h, w = _check_size(type(self).__name__, self.in_shape, self._LAYERS)
        self.body = _two_conv_body(c, (32, 64), (h, w), (512,))
        self.head = nn.Linear(512, self.n_classes)
        self.feature_dim = 512


class ConvNet3(SplitModel):
    """DynaFed's ConvNet: the dataset-distillation ConvNet (Zhao et al.; Cazenavette et al.) of depth 3, width 128.

    dynafed.txt, appendix: "For the network choices, we use ConvNet [30] with 3 layers, and the hidden dimension
    is set to 128." Following the authors' released ``ConvNet`` (``net_norm='instancenorm'``,
    ``net_pooling='avgpooling'``), each of the ``depth`` blocks is::

        Conv2d(c, width, 3, padding=1), GroupNorm(width, width, affine=True) (= instance norm), ReLU, AvgPool2d(2)

    followed by a flatten (the features) and the head Linear(features, classes). Also as in that code, the first
    convolution of a single-channel network is padded by 3 instead of 1 (their code turns 28x28 MNIST into
    32x32 this way), so the features are 128·4·4 = 2048 for both (1, 28, 28) and (3, 32, 32) inputs;
    ``pad_grayscale=False`` pads by 1 everywhere (128·3·3 = 1152 features for 28x28). Needs images of at least
    2**depth pixels a side (less 4 for a padded grayscale network).
    """

    def __init__(
        self, in_shape: Sequence[int], n_classes: int, width: int = 128, depth: int = 3, pad_grayscale: bool = True
    ) -> None:
        super().__init__(in_shape, n_classes)
        width = _validate.count("width", width)
        depth = _validate.count("depth", depth)
        c = self.in_shape[0]
        first_padding = 3 if (pad_grayscale and c == 1) else 1
        layers: list[_Layer] = []
        for d in range(depth):
            layers += [(3, first_padding if d == 0 else 1), "pool"]
        h, w = _check_size(type(self).__name__, self.in_shape, layers)
        blocks: list[nn.Module] = []
        for d in range(depth):
            blocks += [
                nn.Conv2d(c if d == 0 else width, width, kernel_size=3, padding=first_padding if d == 0 else 1),
                nn.GroupNorm(width, width, affine=True),
                nn.ReLU(),
                nn.AvgPool2d(2),
            ]
        self.body = nn.Sequential(*blocks, nn.Flatten())
        self.feature_dim = width * h * w
        self.head = nn.Linear(self.feature_dim, self.n_classes)


class VGG11(SplitModel):
    """VGG-11 without batch norm, as used by Fedssyn and FedPVR (authors' code ``fed_model/vgg.py``, arch "A").

    Body: configuration [64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M] of Conv2d(3x3, padding 1) + ReLU
    and MaxPool2d(2), then flatten: 512 features for 32x32 images. Head, the "final layers" FedPVR applies
    variance reduction to (in the authors' code the 16 conv tensors get no correction, the three FC layers do)::

        Dropout(0.5), Linear(512, 512), ReLU, Dropout(0.5), Linear(512, 512), ReLU, Linear(512, classes)

    Conv weights are initialised N(0, 2 / (3·3·out_channels)) as in the authors' code (He, fan-out; without batch
    norm the PyTorch default is too small for 8 stacked convolutions); biases and FC layers keep PyTorch's
    defaults.

    Other image sizes: five 2x2 max-pools need a side of at least 32. A side in [16, 32) (e.g. 28x28 MNIST) is
    zero-padded to 32 before the first convolution (split evenly, the extra pixel at the bottom/right, as LeNet-5
    did for MNIST); a side below 16 is an InputError. A side of 64 or more leaves more than 1x1 after the last
    pool; then an AdaptiveAvgPool2d((1, 1)) is inserted before the flatten so the features stay 512-d.

    ``width_scale`` multiplies every channel count and the two 512-wide FC layers (``max(1, int(c·width_scale))``)
    so small networks run quickly on a CPU; 1.0 is VGG-11.
    """

    CONFIG: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
    MIN_SIDE = 16
    PAD_TO = 32

    def __init__(self, in_shape: Sequence[int], n_classes: int, width_scale: float = 1.0) -> None:
        super().__init__(in_shape, n_classes)
        scale = _validate.positive("width_scale", width_scale)
        if scale.ndim != 0:
            raise InputError(f"width_scale must be a single number, got {width_scale!r}")
        scale = float(scale)
        c, h, w = self.in_shape
        if min(h, w) < self.MIN_SIDE:
            raise InputError(
                f"VGG11 needs images of at least {self.MIN_SIDE}x{self.MIN_SIDE} pixels (sides below {self.PAD_TO} "
                f"are zero-padded to {self.PAD_TO}), got in_shape={self.in_shape}"
            )
        layers: list[nn.Module] = []
        pad_h, pad_w = max(0, self.PAD_TO - h), max(0, self.PAD_TO - w)
        if pad_h or pad_w:
            layers.append(nn.ZeroPad2d((pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2)))
            h, w = h + pad_h, w + pad_w
        in_channels = c
        for v in self.CONFIG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            else:
                out_channels = max(1, int(int(v) * scale))
                conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
                nn.init.normal_(conv.weight, 0.0, math.sqrt(2.0 / (3 * 3 * out_channels)))
                layers += [conv, nn.ReLU()]
                in_channels = out_channels
        if (h, w) != (1, 1):
            layers.append(nn.AdaptiveAvgPool2d((1, 1)))
        self.body = nn.Sequential(*layers, nn.Flatten())
        self.feature_dim = in_channels
        hidden = max(1, int(512 * scale))
        self.head = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(self.feature_dim, hidden),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, self.n_classes),
        )


MODELS: dict[str, type[SplitModel]] = {
    "mlp": MLP,
    "fedcog-cnn": FedCOGCNN,
    "hfmds-cnn": HFMDsCNN,
    "convnet3": ConvNet3,
    "vgg11": VGG11,
}


def build_model(name: str, in_shape: Sequence[int], n_classes: int, **kwargs: object) -> SplitModel:
    """Build the model registered as ``name`` in :data:`MODELS`; extra keyword arguments go to its constructor.

    Raises InputError for an unknown name, an argument the model does not take, or invalid sizes.

    >>> build_model("resnet", (3, 32, 32), 10)
    Traceback (most recent call last):
    ...
    theory.errors.InputError: unknown model 'resnet'; known models: convnet3, fedcog-cnn, hfmds-cnn, mlp, vgg11
    """
    cls = MODELS.get(name) if isinstance(name, str) else None
    if cls is None and is_plugin(name):  # a user's SplitModel, "package.module:Class" (fl.plugins)
        cls = resolve(name, "model.name", SplitModel)
    if cls is None:
        raise InputError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")
    signature = inspect.signature(cls)
    try:
        signature.bind(in_shape, n_classes, **kwargs)
    except TypeError:
        options = [p for p in signature.parameters if p not in ("in_shape", "n_classes")]
        raise InputError(
            f"model {name!r} takes the options {', '.join(options) or '(none)'}, got {', '.join(kwargs)}"
        ) from None
    try:
        model = cls(in_shape, n_classes, **kwargs)
    except (MemoryError, RuntimeError) as error:  # torch's allocator says "can't allocate memory"
        if not isinstance(error, MemoryError) and "allocate" not in str(error):
            raise
        raise InputError(
            f"model {name} for images {tuple(in_shape)} and {n_classes} classes needs more memory than this machine has"
        ) from None
    if is_plugin(name):
        check_plugin_model(name, model, in_shape, n_classes)
    return model


def check_plugin_model(name: str, model: nn.Module, in_shape: Sequence[int], n_classes: int) -> None:
    """A user's model: an InputError (one line) when it has no trainable parameter or its output for a batch of
    two is not (2, ``n_classes``) logits."""
    if not any(p.requires_grad for p in model.parameters()):
        raise InputError(f"model {name}: it has no trainable parameters")
    try:
        was = model.training
        with torch.no_grad():
            out = model.eval()(torch.zeros(2, *in_shape))
        model.train(was)
    except InputError:
        raise
    except Exception as error:
        said = " ".join(str(error).split())[:200]
        raise InputError(
            f"model {name}: its forward pass on a batch of 2 failed ({type(error).__name__}: {said})"
        ) from None
    shape = tuple(getattr(out, "shape", ()))
    if shape != (2, n_classes):
        raise InputError(f"model {name}: output of shape {shape} for a batch of 2, expected (2, {n_classes}) logits")


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Total number of scalar parameters in ``model`` (only those with ``requires_grad`` if ``trainable_only``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
