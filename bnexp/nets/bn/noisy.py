"""Noisy BN: BN with deliberately injected distributional instability
(Santurkar, Tsipras, Ilyas & Madry 2018, "How Does Batch Normalization Help
Optimization?", Sec. 2.1, Fig. 2).

After the BN transform, every activation is scaled and shifted by noise whose
distribution changes every step; :mod:`bnexp.train.ics` measures what this does to
internal covariate shift. Evaluation multiplies by the noise's expected scale E[s]
(and adds its expected shift E[m] = 0), so inference sees the training-time
activation on average (:class:`NoisyBatchNorm`).

A measurement that feeds several mini-batches through the network to see *one* step's distribution
(the covariate-shift monitor's probe) holds one noise draw over them with :func:`held_noise` /
:meth:`NoisyBatchNorm.hold_noise`; training draws afresh at every forward call.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, Sequence

import torch
from torch import nn

def sample_noise(shape: Sequence[int], unit_dim: int, generator: torch.Generator, a: float = 0.5,
                 b: float = 1.25, c: float = 0.1, d: float = 0.1, dtype: torch.dtype = torch.float32
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw one step's "noisy BN" noise (Santurkar et al. 2018, Sec. 2.1, Fig. 2).

    Per unit j (index along ``unit_dim``) the step's noise distribution is drawn,

        mu_t[j] ~ U(-a, a),   sigma_t[j] ~ U(1, b),

    then independently per activation (every example and position of unit j)

        m ~ U(mu_t[j] - c, mu_t[j] + c),   s ~ N(sigma_t[j], d^2)  (d is the std),

    so that the noisy output s * y + m has a non-zero mean and non-unit scale that
    change every step.

    Args:
        shape: shape of the activation, e.g. (N, d) or (N, C, H, W).
        unit_dim: the unit (feature / channel) dimension, usually 1.
        generator: the torch.Generator to draw from; the tensors are made on its device.
        a, b, c, d: the noise ranges above (a, c, d >= 0, b >= 1).
        dtype: floating dtype of the returned tensors.

    Returns:
        (s, m, mu_t, sigma_t): s and m of ``shape``; mu_t and sigma_t of shape
        (shape[unit_dim],).

    Raises:
        ValueError: invalid ranges or unit_dim.

    Cost: 2 * prod(shape) + 2 * units random numbers (one uniform and one normal per activation).
    """
    _check_noise_ranges(a, b, c, d)
    shape = tuple(int(s) for s in shape)
    if not -len(shape) <= unit_dim < len(shape):
        raise ValueError(f"unit_dim {unit_dim} out of range for shape {shape}")
    return _draw_noise(shape, unit_dim % len(shape), generator, a, b, c, d, dtype)


def _draw_noise(shape: tuple[int, ...], unit_dim: int, generator: torch.Generator, a: float, b: float, c: float,
                d: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`sample_noise` without the checks (ranges validated once by the caller; ``unit_dim`` >= 0):
    the per-step path of :class:`NoisyBatchNorm`."""
    mu_t, sigma_t = _draw_step(shape[unit_dim], generator, a, b, dtype)
    s, m = _draw_activation_noise(shape, unit_dim, generator, mu_t, sigma_t, c, d)
    return s, m, mu_t, sigma_t


def _draw_step(units: int, generator: torch.Generator, a: float, b: float,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's per-unit noise distribution: (mu_t, sigma_t), each (units,), mu_t ~ U(-a, a),
    sigma_t ~ U(1, b) (Santurkar et al. 2018, Sec. 2.1)."""
    dev = generator.device
    mu_t = (torch.rand(units, generator=generator, device=dev, dtype=dtype) * 2 - 1) * a
    sigma_t = 1 + torch.rand(units, generator=generator, device=dev, dtype=dtype) * (b - 1)
    return mu_t, sigma_t


def _draw_activation_noise(shape: tuple[int, ...], unit_dim: int, generator: torch.Generator, mu_t: torch.Tensor,
                           sigma_t: torch.Tensor, c: float, d: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-activation noise of ``shape`` given the step's (units,) mu_t and sigma_t:
    m ~ U(mu_t - c, mu_t + c), s ~ N(sigma_t, d^2); returns (s, m)."""
    dev, dtype = generator.device, mu_t.dtype
    view = [1] * len(shape)
    view[unit_dim] = shape[unit_dim]
    m = mu_t.view(view) + (torch.rand(shape, generator=generator, device=dev, dtype=dtype) * 2 - 1) * c
    s = sigma_t.view(view) + torch.randn(shape, generator=generator, device=dev, dtype=dtype) * d
    return s, m


def _check_noise_ranges(a: float, b: float, c: float, d: float) -> None:
    if not (a >= 0 and b >= 1 and c >= 0 and d >= 0) or not all(math.isfinite(v) for v in (a, b, c, d)):
        raise ValueError(f"noisy BN needs finite a >= 0, b >= 1, c >= 0, d >= 0; got a={a}, b={b}, c={c}, d={d}")


class NoisyBatchNorm(nn.Module):
    """BN followed by time-varying noise: the "noisy BN" of Santurkar et al. 2018, Sec. 2.1, Fig. 2.

    In training mode, y = bn(x) and then y <- s * y + m with the noise of
    :func:`sample_noise` drawn afresh at every forward call: per unit j (feature of a
    (N, d) input, channel of an (N, C, H, W) one) mu_t ~ U(-a, a), sigma_t ~ U(1, b); per
    activation m ~ U(mu_t - c, mu_t + c), s ~ N(sigma_t, d^2). The noise is a constant
    for autograd.

    In eval mode the noise is replaced by its expectation: y = E[s] * bn(x) + E[m] with bn's
    running statistics, where (the noise is independent of x)

        E[s] = E[E[s | sigma_t]] = E[sigma_t] = (1 + b) / 2,
        E[m] = E[E[m | mu_t]] = E[mu_t] = (-a + a) / 2 = 0,

    so for a frozen input whose BN output is y the eval output is the training output's mean over
    the noise, E[s * y + m] = E[s] * y + E[m] (:attr:`expected_scale`, :attr:`expected_shift`).
    Without this, a network trained with every activation scaled by E[s] (1.125 for the default
    b = 1.25) would be evaluated at scale 1 (a train/eval mismatch). With b = 1 (``bn.noise_scale=0``)
    E[s] = 1 and the eval output is exactly bn(x).

    The noise comes from the module's own seeded ``torch.Generator`` (never torch's
    global RNG), created lazily on the device of the first training input. If a later
    input is on another device, a new generator is made there, seeded from the old
    one (deterministic, but not the same stream as on the first device).

    The wrapped BN is the sub-module ``bn``, so the state_dict holds exactly the BN's
    parameters and buffers under a ``bn.`` prefix (no noise state): the generator is
    saved and restored with :meth:`noise_state` / :meth:`load_noise_state`.

    Args:
        bn: the BN module to wrap (``nn.BatchNorm1d``/``2d`` or ``ReferenceBatchNorm``).
        a, b, c, d: noise ranges (defaults 0.5, 1.25, 0.1, 0.1), a, c, d >= 0, b >= 1.
        seed: seed of the noise generator.

    Held noise (:meth:`hold_noise`, :func:`held_noise`): inside the block the step's per-unit
    distribution (mu_t, sigma_t) is drawn once, at the first training forward call, and every
    training forward call in the block reuses it (the per-activation s and m are still drawn from
    it, as within one training step). So several mini-batches fed through the network see one
    step's noise, as one training step does, instead of a mixture of many steps' noise whose
    per-unit shifts average out.

    Attributes:
        last_mu, last_sigma: the (units,) mu_t and sigma_t of the latest training
            forward call (None before the first).

    Raises:
        ValueError: invalid ranges; inputs with fewer than 2 dimensions (in forward).

    Cost: BN's cost plus 2 random numbers and 2 multiply-adds per activation per step.
    """

    def __init__(self, bn: nn.Module, a: float = 0.5, b: float = 1.25, c: float = 0.1, d: float = 0.1,
                 seed: int = 0):
        super().__init__()
        _check_noise_ranges(a, b, c, d)
        self.bn = bn
        self.a, self.b, self.c, self.d = float(a), float(b), float(c), float(d)
        self.seed = int(seed)
        self._generator: torch.Generator | None = None
        self.last_mu: torch.Tensor | None = None
        self.last_sigma: torch.Tensor | None = None
        self._held: dict | None = None  # {"mu", "sigma"} while hold_noise is active (None: draw at first use)

    def _generator_for(self, device: torch.device) -> torch.Generator:
        g = self._generator
        if g is None:
            g = torch.Generator(device=device)
            g.manual_seed(self.seed)
        elif g.device != device:
            new_seed = int(torch.randint(0, 2**62, (1,), generator=g, device=g.device).item())
            g = torch.Generator(device=device)
            g.manual_seed(new_seed)
        self._generator = g
        return g

    @property
    def expected_scale(self) -> float:
        """E[s] = E[sigma_t] = (1 + b) / 2, with sigma_t ~ U(1, b) and s ~ N(sigma_t, d^2)."""
        return (1.0 + self.b) / 2.0

    @property
    def expected_shift(self) -> float:
        """E[m] = E[mu_t] = 0, with mu_t ~ U(-a, a) and m ~ U(mu_t - c, mu_t + c)."""
        return (-self.a + self.a) / 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training: s * bn(x) + m with fresh noise (inside :meth:`hold_noise`: s and m drawn from the held
        mu_t, sigma_t); eval: E[s] * bn(x) + E[m]. Same shape as x."""
        y = self.bn(x)
        if not self.training:
            scale, shift = self.expected_scale, self.expected_shift
            if scale != 1.0:
                y = y * scale
            return y + shift if shift != 0.0 else y
        if x.dim() < 2:
            raise ValueError(f"expected an input with a unit dimension 1, got shape {tuple(x.shape)}")
        if self._held is None:
            s, m = self.draw(tuple(y.shape), y.device, y.dtype)
            return s * y + m
        gen = self._generator_for(y.device)
        mu_t, sigma_t = self._held_step(y, gen)
        s, m = _draw_activation_noise(tuple(y.shape), 1, gen, mu_t, sigma_t, self.c, self.d)
        self.last_mu, self.last_sigma = mu_t.detach(), sigma_t.detach()
        return s * y + m

    def draw(self, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """One training step's noise (s, m) for an activation of ``shape`` with units on dim 1, from this
        layer's generator (:func:`sample_noise`); sets :attr:`last_mu` / :attr:`last_sigma`. A stack of runs
        (:mod:`bnexp.train.stacked_net`) draws each run's noise with it, as its forward would."""
        gen = self._generator_for(device)  # the ranges were checked once, in __init__
        s, m, mu_t, sigma_t = _draw_noise(tuple(shape), 1, gen, self.a, self.b, self.c, self.d, dtype)
        self.last_mu, self.last_sigma = mu_t.detach(), sigma_t.detach()
        return s, m

    def _held_step(self, y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The held (mu_t, sigma_t), drawn now if the block has none yet, on y's device and dtype."""
        held = self._held
        units = y.shape[1]
        if held["mu"] is None:
            held["mu"], held["sigma"] = _draw_step(units, gen, self.a, self.b, y.dtype)
        for key in ("mu", "sigma"):
            v = torch.as_tensor(held[key], dtype=y.dtype, device=y.device)
            held[key] = v.expand(units).clone() if v.dim() == 0 else v
            if held[key].shape != (units,):
                raise ValueError(f"held noise {key} has shape {tuple(held[key].shape)}, expected ({units},)")
        return held["mu"], held["sigma"]

    @contextlib.contextmanager
    def hold_noise(self, mu: torch.Tensor | float | None = None,
                   sigma: torch.Tensor | float | None = None) -> Iterator["NoisyBatchNorm"]:
        """Hold one step's noise distribution over every training forward call inside the block.

        Args:
            mu, sigma: the per-unit mu_t and sigma_t to hold ((units,) tensors or floats for every
                unit; a measurement of a known injected shift); None (both): drawn from the module's
                generator at the first training forward call in the block (as a training step's).

        Yields:
            the module.

        Blocks nest: inside an enclosing block the outer hold wins (its draw or its given values stay),
        so a test can hold a known shift around a measurement that holds the noise itself.

        Raises:
            ValueError: only one of mu and sigma given; ValueError (in forward): a held tensor of the
                wrong size.
        """
        if (mu is None) != (sigma is None):
            raise ValueError("hold_noise needs both mu and sigma, or neither")
        if self._held is not None:
            yield self
            return
        self._held = {"mu": mu, "sigma": sigma}
        try:
            yield self
        finally:
            self._held = None

    def noise_state(self) -> dict:
        """The generator's state for checkpoints: {"seed": int, "device": str or None,
        "state": CPU ByteTensor or None} (None before the first training forward)."""
        g = self._generator
        return {"seed": self.seed, "device": None if g is None else str(g.device),
                "state": None if g is None else g.get_state().clone()}

    def load_noise_state(self, state: dict) -> None:
        """Restore :meth:`noise_state`: the next training step draws what it would have drawn.

        Raises:
            KeyError: missing keys; RuntimeError (from torch) if the saved device is unavailable.
        """
        self.seed = int(state["seed"])
        if state["state"] is None:
            self._generator = None
            return
        g = torch.Generator(device=torch.device(state["device"]))
        g.set_state(state["state"].cpu())
        self._generator = g

    def extra_repr(self) -> str:
        return f"a={self.a}, b={self.b}, c={self.c}, d={self.d}, seed={self.seed}"


@contextlib.contextmanager
def held_noise(model: nn.Module) -> Iterator[list[NoisyBatchNorm]]:
    """:meth:`NoisyBatchNorm.hold_noise` for every noisy-BN layer of ``model`` at once: inside the block
    each layer draws one noise distribution (mu_t, sigma_t) and reuses it for all training forward
    calls, e.g. the covariate-shift monitor's probe mini-batches of one record. A model without
    noisy BN is unaffected.

    Yields:
        the model's :class:`NoisyBatchNorm` layers.
    """
    layers = [m for m in model.modules() if isinstance(m, NoisyBatchNorm)]
    with contextlib.ExitStack() as stack:
        for m in layers:
            stack.enter_context(m.hold_noise())
        yield layers
