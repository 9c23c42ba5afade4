"""DSA and crop + flip (fl.augment): identity parameters give the input back, gradients in the images equal
central finite differences, a seeded generator repeats bit for bit (also after get_state/set_state), and each
group does what its docstring says, checked against an independent few-line reference."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from fl.augment import (
    DSA_STRATEGY,
    GROUPS,
    apply,
    crop_flip,
    crop_radius,
    draw,
    dsa,
    identity,
    strategy_groups,
    translate,
)

EXACT_GROUPS = ("crop", "cutout", "flip")  # index / mask operations: no arithmetic on the kept pixels


def images(shape, seed=0):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --------------------------------------------------------------------------------------------- identity


@pytest.mark.parametrize("group", GROUPS)
def test_identity_parameters_return_the_input(group):
    x = images((3, 2, 8, 8))
    out = apply(group, x, identity(group, len(x), tuple(x.shape[1:])))
    assert out.shape == x.shape and out.dtype == x.dtype
    torch.testing.assert_close(out, x, rtol=0, atol=1e-12)
    if group in EXACT_GROUPS:
        assert torch.equal(out, x)


# --------------------------------------------------------------------------------------------- gradients


def central_differences(f, x, eps=1e-6):
    grad = torch.zeros_like(x)
    flat, out = x.view(-1), grad.view(-1)
    for j in range(flat.numel()):
        saved = flat[j].item()
        flat[j] = saved + eps
        up = f(x).item()
        flat[j] = saved - eps
        down = f(x).item()
        flat[j] = saved
        out[j] = (up - down) / (2 * eps)
    return grad


@pytest.mark.parametrize("group", GROUPS)
def test_gradient_through_a_fixed_augmentation_equals_central_differences(group):
    x = images((2, 2, 6, 6), seed=1)
    w = images((2, 2, 6, 6), seed=2) - 0.5
    params = draw(group, len(x), tuple(x.shape[1:]), torch.Generator().manual_seed(3))

    def f(inputs):
        return (apply(group, inputs, params) * w).sum()

    leaf = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(leaf), leaf)
    with torch.no_grad():
        numeric = central_differences(f, x.clone())
    torch.testing.assert_close(grad, numeric, rtol=0, atol=1e-7)
    assert grad.abs().sum() > 0


@pytest.mark.parametrize("group", ["scale", "rotate", "color"])
def test_gradcheck_of_the_resampling_and_colour_groups(group):
    x = images((2, 2, 5, 5), seed=4).requires_grad_(True)
    params = draw(group, len(x), tuple(x.shape[1:]), torch.Generator().manual_seed(5))
    assert torch.autograd.gradcheck(lambda inputs: apply(group, inputs, params), (x,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("groups", [GROUPS] + [(g,) for g in GROUPS])
def test_dsa_is_differentiable(groups):
    generator = torch.Generator().manual_seed(6)
    w = images((4, 3, 8, 8), seed=7) - 0.5
    for _ in range(3):
        x = images((4, 3, 8, 8), seed=8).requires_grad_(True)
        (dsa(x, groups, generator) * w).sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape
        assert torch.isfinite(x.grad).all()
        assert x.grad.abs().sum() > 0  # no group with drawn parameters discards every pixel


# ---------------------------------------------------------------------------------------- determinism


def dsa_calls(x, generator, calls):
    return [dsa(x, GROUPS, generator) for _ in range(calls)]


def test_same_seed_same_augmentation_and_a_restored_generator_continues_identically():
    x = images((5, 3, 8, 8))
    first, second = torch.Generator().manual_seed(123), torch.Generator().manual_seed(123)
    for a, b in zip(dsa_calls(x, first, 6), dsa_calls(x, second, 6)):
        assert torch.equal(a, b)
    # A resumed run: the state saved now, restored into a fresh generator, continues as the original does.
    state = first.get_state()
    resumed = torch.Generator()
    resumed.set_state(state)
    for a, b in zip(dsa_calls(x, first, 6), dsa_calls(x, resumed, 6)):
        assert torch.equal(a, b)
    # crop_flip draws from the generator the same way.
    resumed.set_state(state)
    first.set_state(state)
    assert torch.equal(crop_flip(x, first, fill=0.5), crop_flip(x, resumed, fill=0.5))


def test_different_seeds_give_different_augmentations():
    x = images((5, 3, 8, 8))
    a = dsa_calls(x, torch.Generator().manual_seed(1), 6)
    b = dsa_calls(x, torch.Generator().manual_seed(2), 6)
    assert any(not torch.equal(u, v) for u, v in zip(a, b))
    c = crop_flip(x, torch.Generator().manual_seed(1))
    d = crop_flip(x, torch.Generator().manual_seed(2))
    assert not torch.equal(c, d)


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_draws_its_parameters_from_the_generator_passed_in(group):
    x = images((16, 3, 8, 8))
    same = [dsa(x, (group,), torch.Generator().manual_seed(4)) for _ in range(2)]
    assert torch.equal(same[0], same[1])
    assert not torch.equal(same[0], dsa(x, (group,), torch.Generator().manual_seed(5)))


# --------------------------------------------------------------------------------------- crop and flip


def reference_translate(x, dy, dx, fill):
    """out[:, r, c] = x[:, r + dy, c + dx], ``fill`` outside: pad every side by the largest shift, then slice."""
    _, h, w = x.shape
    r = max(abs(dy), abs(dx))
    fills = torch.as_tensor(fill, dtype=x.dtype).reshape(-1).expand(len(x))
    padded = torch.stack([F.pad(channel, (r, r, r, r), value=float(v)) for channel, v in zip(x, fills)])
    return padded[:, r + dy : r + dy + h, r + dx : r + dx + w]


@pytest.mark.parametrize("fill", [0.0, -3.0, (7.0, -2.0)])
def test_translate_is_pad_with_fill_then_slice(fill):
    shifts = [(0, 0), (1, 2), (-1, 3), (-4, -4), (4, -2), (0, -3), (3, 0), (-2, 1)]
    x = images((len(shifts), 2, 7, 6), seed=9)
    out = translate(x, torch.tensor(shifts), fill)
    for i, (dy, dx) in enumerate(shifts):
        assert torch.equal(out[i], reference_translate(x[i], dy, dx, fill)), (dy, dx)


def test_translate_moves_content_by_the_shift():
    x = torch.arange(16, dtype=torch.float64).view(1, 1, 4, 4)
    out = translate(x, torch.tensor([[1, -1]]), fill=-1.0)[0, 0]
    expected = torch.tensor([[-1, 4, 5, 6], [-1, 8, 9, 10], [-1, 12, 13, 14], [-1, -1, -1, -1]], dtype=x.dtype)
    assert torch.equal(out, expected)


def test_translate_is_differentiable_in_x_not_in_the_fill():
    x = images((2, 1, 5, 5), seed=10).requires_grad_(True)
    translate(x, torch.tensor([[2, -1], [-3, 0]]), fill=9.0).sum().backward()
    # Each input pixel lands at most once; exactly those that stay inside the image have gradient 1.
    kept = torch.zeros(2, 1, 5, 5, dtype=torch.float64)
    kept[0, :, 2:, :4] = 1
    kept[1, :, :2, :] = 1
    assert torch.equal(x.grad, kept)


@pytest.mark.parametrize("fill", [0.0, -5.0])
def test_crop_flip_outputs_a_translation_within_four_pixels_or_its_mirror(fill):
    n, pad = 200, 4
    x = images((n, 1, 10, 10), seed=11) + 1.0  # values in [1, 2): never equal to the fill
    out = crop_flip(x, torch.Generator().manual_seed(12), fill=fill, pad=pad)
    assert out.shape == x.shape
    candidates = list(itertools.product(range(-pad, pad + 1), range(-pad, pad + 1), (False, True)))
    matches = torch.zeros(n, len(candidates), dtype=torch.bool)
    for j, (dy, dx, flipped) in enumerate(candidates):
        ref = F.pad(x, (pad, pad, pad, pad), value=fill)[:, :, pad + dy : pad + dy + 10, pad + dx : pad + dx + 10]
        ref = ref.flip(-1) if flipped else ref
        matches[:, j] = (out == ref).flatten(1).all(1)
    # Every image is a translation in {-4..4}², maybe mirrored, and only one (random pixels: no ambiguity).
    assert torch.equal(matches.sum(1), torch.ones(n, dtype=torch.long))
    found = [candidates[j] for j in matches.int().argmax(1).tolist()]
    dys, dxs, flips = zip(*found)
    # Over 200 images every shift value and both flip states occur (each has probability 1/9 or 1/2).
    assert set(dys) == set(dxs) == set(range(-pad, pad + 1))
    assert set(flips) == {False, True}


@pytest.mark.parametrize("size", [28, 32])
def test_drawn_crop_shifts_stay_within_the_radius(size):
    assert crop_radius(size) == 4
    shift = draw("crop", 500, (1, size, size), torch.Generator().manual_seed(13))["shift"]
    assert shift.shape == (500, 2) and shift.dtype == torch.int64
    assert shift.abs().max() == 4 and set(shift.unique().tolist()) == set(range(-4, 5))


# ----------------------------------------------------------------------------------------- cutout, flip


def reference_cutout(x, centre_row, centre_col, side):
    out = x.clone()
    low_row, low_col = centre_row - side // 2, centre_col - side // 2
    for r in range(low_row, low_row + side):
        for c in range(low_col, low_col + side):
            if 0 <= r < x.shape[-2] and 0 <= c < x.shape[-1]:
                out[:, r, c] = 0
    return out


def test_cutout_zeroes_a_side_by_side_square_clipped_by_the_border():
    centres = [(4, 4), (0, 0), (7, 7), (8, 8), (2, 6), (5, 1)]
    x = images((len(centres), 2, 8, 8), seed=14) + 1.0  # no zero pixels before the cutout
    for side in (1, 3, 4):
        params = {"centre": torch.tensor(centres), "side": torch.full((len(centres),), side)}
        out = apply("cutout", x, params)
        for i, (r, c) in enumerate(centres):
            assert torch.equal(out[i], reference_cutout(x[i], r, c, side)), (side, r, c)
    # Unclipped, the square is exactly side x side on every channel.
    params = {"centre": torch.tensor([[4, 4]]), "side": torch.tensor([4])}
    out = apply("cutout", x[:1], params)
    assert torch.equal((out[0] == 0).sum((1, 2)), torch.tensor([16, 16]))
    assert torch.equal((out[0, 0] == 0).nonzero()[[0, -1]], torch.tensor([[2, 2], [5, 5]]))


def test_drawn_cutout_side_is_half_the_image():
    params = draw("cutout", 300, (3, 8, 8), torch.Generator().manual_seed(15))
    assert torch.equal(params["side"], torch.full((300,), 4))
    assert params["centre"].min() >= 0 and params["centre"].max() <= 8


def test_flip_true_mirrors_the_last_axis_and_false_keeps_the_image():
    x = images((3, 2, 4, 5), seed=16)
    out = apply("flip", x, {"flip": torch.tensor([True, False, True])})
    assert torch.equal(out[0], x[0, :, :, [4, 3, 2, 1, 0]])
    assert torch.equal(out[1], x[1])
    assert torch.equal(out[2], x[2].flip(-1))


# --------------------------------------------------------------------------------------------------- colour


def test_saturation_has_no_effect_on_one_channel():
    x = images((3, 1, 6, 6), seed=17)
    common = {"brightness": torch.tensor([0.2, -0.4, 0.0]), "contrast": torch.tensor([0.7, 1.3, 1.0])}
    low = apply("color", x, {**common, "saturation": torch.full((3,), 0.3)})
    high = apply("color", x, {**common, "saturation": torch.full((3,), 1.7)})
    torch.testing.assert_close(low, high, rtol=0, atol=1e-12)


def test_color_against_the_formulas_written_out():
    x = images((2, 3, 4, 4), seed=18)
    b, s, c = torch.tensor([0.3, -0.2]), torch.tensor([0.5, 1.8]), torch.tensor([1.4, 0.6])
    out = apply("color", x, {"brightness": b, "saturation": s, "contrast": c})
    for i in range(2):
        y = x[i] + b[i].item()
        pixel_mean = y.mean(0, keepdim=True)
        y = (y - pixel_mean) * s[i].item() + pixel_mean
        y = (y - y.mean()) * c[i].item() + y.mean()
        torch.testing.assert_close(out[i], y, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------ strategy


def test_strategy_groups():
    assert strategy_groups("color_crop_cutout_flip_scale_rotate") == GROUPS
    assert strategy_groups(DSA_STRATEGY) == ("color", "crop", "cutout", "flip", "scale", "rotate")
    assert strategy_groups("crop_flip") == ("crop", "flip")
    for bad in ("color_blur", "noise", "", "_"):
        with pytest.raises(ValueError, match="unknown DSA group"):
            strategy_groups(bad)
    with pytest.raises(ValueError, match="unknown DSA group"):
        draw("blur", 2, (1, 4, 4), torch.Generator())
    with pytest.raises(ValueError, match="unknown DSA group"):
        apply("blur", torch.zeros(2, 1, 4, 4), {})
