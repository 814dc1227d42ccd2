"""R runs of one network as one batched model: the step of a stack (``hydra/launcher=stacked``, docs/stacked.md).

:class:`StackedNet` takes the R runs' own models -- built by their own trainers from their own seeds --
and stacks every parameter and buffer along a new leading dimension R. Each run's model then *views*
its slice of the stacked tensors (``param.data = stacked[r]``), so the run's model is always the run's
current state: its measurements, evaluations and checkpoints read it as if it had trained alone.

One step (:meth:`StackedNet.step`) is one SGD update of every run on its own mini-batch:

* fully-connected layers: batched matrix products ``(R, m, d_in) @ (R, d_in, d_out)``;
* convolutions: one grouped convolution, ``groups=R``, on the (m, R*C, H, W) layout in which channel
  r*C + c is run r's channel c;
* BN: per run and unit, over that run's m examples (Alg. 1), with per-run running statistics
  (:func:`bnexp.nets.bn.stacked.stacked_batch_norm`); noisy BN draws each run's noise from the run's
  own layer (:meth:`bnexp.nets.bn.NoisyBatchNorm.draw`);
* dropout: each run's mask is drawn from the run's own torch RNG state, exactly as its ``nn.Dropout``
  would have drawn it;
* the loss is the sum over runs of each run's mean cross-entropy, so each run's gradient is its own;
* the SGD update (torch.optim.SGD's rule: weight decay, momentum, Nesterov) with each run's own rate and
  weight decay, the (R,) vectors ``lr`` and ``weight_decay``.

What stacks (:func:`stackable`): ``model=mlp`` and ``model=cnn`` with torch's BN (``bn.impl=torch``, before
or after g, noisy or not) or without BN; other normalizers (ghost BN, LayerNorm, GroupNorm, the reference
implementation) train alone.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from bnexp.nets.bn import NoisyBatchNorm
from bnexp.nets.bn.stacked import stacked_batch_norm
from bnexp.nets.models import CNN, MLP, HiddenLayer
from bnexp.train.precision import autocast

BN_CLASSES = (nn.BatchNorm1d, nn.BatchNorm2d)


class _LinearSGD(torch.autograd.Function):
    """y = x W_r^T for each run r, whose backward also makes plain SGD's update of W in place:
    W_r <- W_r - lr_r dL/dW_r = W_r + (-lr_r g_r)^T x_r, one batched product (``baddbmm_``), so the (R, out, in)
    gradient is never written and read again (at R = 32 the update of the stacked 784x100 weights was
    a fifth of a step). Returns dL/dx (computed with W before its update); W gets no ``.grad``.

    Shapes: x (R, m, in), W (R, out, in), bias (R, out) or None, neg_lr (R,) = -lr; y (R, m, out). The bias
    (added inside the product, as ``nn.Linear``'s addmm) gets its gradient as usual.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, neg_lr: torch.Tensor
                ) -> torch.Tensor:
        ctx.save_for_backward(x, w, neg_lr)
        wt = w.detach().transpose(1, 2)
        return torch.bmm(x, wt) if bias is None else torch.baddbmm(bias.detach().unsqueeze(1), x, wt)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, w, neg_lr = ctx.saved_tensors
        gx = torch.bmm(g, w.detach()) if ctx.needs_input_grad[0] else None
        gb = g.sum(1) if ctx.needs_input_grad[2] else None
        with torch.no_grad():  # -lr_r folded into g: one product, rounding within ~1e-7 of torch SGD's update
            w.baddbmm_((g * neg_lr.view(-1, 1, 1)).transpose(1, 2), x)
        return gx, None, gb, None


def stackable(model: nn.Module) -> str | None:
    """Why ``model`` cannot be trained in a stack, or None when it can.

    Returns:
        None for an :class:`~bnexp.nets.models.MLP` or :class:`~bnexp.nets.models.CNN` whose
        normalizers are all ``nn.BatchNorm1d/2d`` (with affine parameters, running statistics and a
        momentum), optionally inside :class:`~bnexp.nets.bn.NoisyBatchNorm`; else a short reason.
    """
    if not isinstance(model, (MLP, CNN)):
        return f"model {type(model).__name__} has no stacked form"
    for layer in model.modules():
        if isinstance(layer, HiddenLayer) and layer.bn is not None:
            bn = layer.bn.bn if isinstance(layer.bn, NoisyBatchNorm) else layer.bn
            if type(bn) not in BN_CLASSES:
                return f"normalizer {type(bn).__name__} has no stacked form"
            if not (bn.affine and bn.track_running_stats and bn.momentum is not None):
                return "BN without affine parameters, running statistics or momentum"
    return None


class StackedNet:
    """The batched model of R runs of one architecture, and its per-run SGD update.

    Args:
        models: the R runs' models (same class and shapes; each in training mode).
        optimizers: their ``torch.optim.SGD`` optimizers (one parameter group each; same momentum and
            Nesterov setting): their momentum buffers, if any, are taken over and then viewed too.
        rng_swap: ``rng_swap(r)`` is a context manager under which torch's global RNG is run r's own
            (dropout masks are drawn inside it).

    Raises:
        ValueError: a model that :func:`stackable` refuses, or models of different structure.
    """

    def __init__(self, models: list[nn.Module], optimizers: list[torch.optim.SGD],
                 rng_swap: Callable[[int], object]):
        if not models:
            raise ValueError("a stack needs at least one run")
        why = stackable(models[0])
        if why:
            raise ValueError(why)
        self.R = len(models)
        self.models, self.optimizers, self.rng_swap = list(models), list(optimizers), rng_swap
        group = optimizers[0].param_groups[0]
        self.momentum, self.nesterov = float(group["momentum"]), bool(group["nesterov"])
        names = [n for n, _ in models[0].named_parameters()]
        per_model = [dict(m.named_parameters()) for m in models]
        if any(list(p) != names for p in per_model):
            raise ValueError("the runs of a stack must have the same network")
        # every parameter and buffer stacked along a new dim 0; each run's tensors become views of its slice
        self.params: dict[str, torch.Tensor] = {}
        self.buffers: dict[str, torch.Tensor] = {}
        self.momentum_buffers: dict[str, torch.Tensor | None] = {}
        for name in names:
            members = [p[name] for p in per_model]
            stacked = torch.stack([p.detach() for p in members]).requires_grad_(True)
            self.params[name] = stacked
            bufs = [opt.state.get(p, {}).get("momentum_buffer") for opt, p in zip(optimizers, members)]
            self.momentum_buffers[name] = (torch.stack([b.detach() for b in bufs])
                                           if all(b is not None for b in bufs) else None)
            for r, p in enumerate(members):
                p.data = stacked.detach()[r]
                if self.momentum_buffers[name] is not None:
                    optimizers[r].state[p]["momentum_buffer"] = self.momentum_buffers[name][r]
        for name, _ in models[0].named_buffers():
            members = [dict(m.named_buffers())[name] for m in models]
            stacked = torch.stack([b.detach() for b in members])
            self.buffers[name] = stacked
            for r, b in enumerate(members):
                b.data = stacked[r]
        self.ops = self._plan(models[0])
        self._neg_lr: torch.Tensor | None = None
        # the weights of the fully-connected layers: updated by _LinearSGD in plain SGD
        self.fused_names = {f"{op[1]}.weight" for op in self.ops if op[0] == "linear"}
        self._members = {name: [dict(m.named_parameters())[name] for m in models] for name in names}

    # ----- structure ---------------------------------------------------------------
    def _plan(self, model: nn.Module) -> list[tuple]:
        """The forward pass as a list of (kind, ...) operations on the stacked tensors."""
        ops: list[tuple] = []
        if isinstance(model, MLP):
            ops.append(("flatten_input",))
            for i, layer in enumerate(model.hidden):
                ops += self._hidden(f"hidden.{i}", layer, conv=False)
        else:
            ops.append(("to_grouped",))
            for i, mod in enumerate(model.features):
                if isinstance(mod, HiddenLayer):
                    ops += self._hidden(f"features.{i}", mod, conv=True)
                elif isinstance(mod, nn.MaxPool2d):
                    ops.append(("pool", mod.kernel_size))
                else:
                    raise ValueError(f"layer {type(mod).__name__} has no stacked form")
            ops.append(("flatten_grouped",))
            ops += self._hidden("fc", model.fc, conv=False)
        rates = [float(m.dropout.p) if m.dropout is not None else 0.0 for m in self.models]
        if any(rates):  # model.dropout may differ between the runs of a stack
            ops.append(("dropout", rates))
        ops.append(("linear", "classifier"))
        return ops

    def _hidden(self, prefix: str, layer: HiddenLayer, conv: bool) -> list[tuple]:
        ops: list[tuple] = [("conv" if conv else "linear", f"{prefix}.affine")]
        if layer.bn is not None:
            noisy = isinstance(layer.bn, NoisyBatchNorm)
            bn = layer.bn.bn if noisy else layer.bn
            idx = [m for m, _ in self._layers_named(prefix)]
            bn_op = ("bn", f"{prefix}.bn.bn" if noisy else f"{prefix}.bn", float(bn.momentum), float(bn.eps),
                     idx if noisy else None)
        if layer.bn is not None and not layer.after:
            ops.append(bn_op)
        ops.append(("act", type(layer.act)))
        if layer.bn is not None and layer.after:
            ops.append(bn_op)
        return ops

    def _layers_named(self, prefix: str) -> list[tuple[NoisyBatchNorm, int]]:
        """Each run's noisy BN layer at ``prefix`` (its own noise generator)."""
        return [(m.get_submodule(f"{prefix}.bn"), r) for r, m in enumerate(self.models)]

    # ----- the step ----------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training-mode forward of every run on its own mini-batch.

        Args:
            x: (R, m, C, H, W) inputs, run r's mini-batch at ``x[r]``.

        Returns:
            (R, m, classes) logits.
        """
        R, m = x.shape[0], x.shape[1]
        p, b = self.params, self.buffers
        h = x
        for op in self.ops:
            kind = op[0]
            if kind == "flatten_input":
                h = h.reshape(R, m, -1)
            elif kind == "to_grouped":  # (R, m, C, H, W) -> (m, R*C, H, W): run r's channels r*C .. r*C+C-1
                h = h.transpose(0, 1).reshape(m, R * x.shape[2], *x.shape[3:])
            elif kind == "linear":
                w, bias = p[f"{op[1]}.weight"], p.get(f"{op[1]}.bias")
                if self._neg_lr is not None:  # plain SGD: the weight's update made in the backward pass
                    h = _LinearSGD.apply(h, w, bias, self._neg_lr)
                else:
                    h = torch.bmm(h, w.transpose(1, 2)) if bias is None else torch.baddbmm(
                        bias.unsqueeze(1), h, w.transpose(1, 2))
            elif kind == "conv":
                w, bias = p[f"{op[1]}.weight"], p.get(f"{op[1]}.bias")
                h = F.conv2d(h, w.reshape(-1, *w.shape[2:]), None if bias is None else bias.reshape(-1),
                             padding=1, groups=R)
            elif kind == "bn":
                _, name, momentum, eps, noisy = op
                b[f"{name}.num_batches_tracked"].add_(1)  # as nn.BatchNorm's training forward
                y = stacked_batch_norm(h, b[f"{name}.running_mean"], b[f"{name}.running_var"],
                                       p[f"{name}.weight"], p[f"{name}.bias"], True, momentum, eps)
                h = y if noisy is None else self._noise(y, noisy)
            elif kind == "act":
                h = torch.sigmoid(h) if op[1] is nn.Sigmoid else torch.relu(h)
            elif kind == "pool":
                h = F.max_pool2d(h, op[1])
            elif kind == "flatten_grouped":  # (m, R*C, h, w) -> (R, m, C*h*w), each run's features in C, h, w order
                h = h.reshape(m, R, -1).transpose(0, 1)
            elif kind == "dropout":
                h = h * self._dropout_masks(op[1], tuple(h.shape[1:]), h)
        return h

    def _noise(self, y: torch.Tensor, layers: list[NoisyBatchNorm]) -> torch.Tensor:
        """s * y + m with each run's noise from its own layer, drawn in its own (alone) shape."""
        if y.dim() == 3:  # (R, m, d): run r's activation is y[r]
            shape = tuple(y.shape[1:])
            draws = [layer.draw(shape, y.device, y.dtype) for layer in layers]
            s, m = torch.stack([d[0] for d in draws]), torch.stack([d[1] for d in draws])
        else:  # (N, R*C, H, W): run r's activation is channels r*C .. r*C+C-1
            n, rc, hh, ww = y.shape
            shape = (n, rc // self.R, hh, ww)
            draws = [layer.draw(shape, y.device, y.dtype) for layer in layers]
            s, m = (torch.cat([d[i] for d in draws], dim=1) for i in (0, 1))
        return s * y + m

    def _dropout_masks(self, rates: list[float], shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """(R, *shape) dropout multipliers (0 or 1/(1-p_r)): run r's from its own torch RNG, as its
        ``nn.Dropout`` on an activation of ``shape`` would draw them (``F.dropout`` of ones is the noise
        tensor it multiplies by); ones for a run without dropout (which draws nothing)."""
        ones = torch.ones(shape, device=like.device, dtype=like.dtype)
        masks = []
        for r, p in enumerate(rates):
            if p > 0:
                with self.rng_swap(r):
                    masks.append(F.dropout(ones, p, training=True))
            else:
                masks.append(ones)
        return torch.stack(masks)

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: torch.Tensor, weight_decay: torch.Tensor,
             amp_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One SGD update of every run on its own mini-batch.

        Args:
            x: (R, m, C, H, W) inputs; y: (R, m) labels.
            lr: (R,) each run's learning rate for this update.
            weight_decay: (R,) each run's L2 weight decay (``optim.weight_decay``).
            amp_dtype: the forward pass's autocast dtype (``trainer.precision``), None for fp32.

        Returns:
            (loss, logits), detached: (R,) each run's mean cross-entropy in nats, (R, m, classes).
        """
        # plain SGD in fp32 (no momentum, no weight decay): the fully-connected weights are updated in the
        # backward pass itself (_LinearSGD); rounding differs from torch.optim.SGD's by about 1e-7 relative
        fused = self.momentum == 0 and weight_decay is None and amp_dtype is None
        self._neg_lr = -lr if fused else None
        try:
            with autocast(x.device, amp_dtype):
                logits = self.forward(x)
            logits = logits.float()
            R, m, k = logits.shape
            loss = F.cross_entropy(logits.reshape(R * m, k), y.reshape(-1), reduction="none").view(R, m).mean(1)
            names = [n for n in self.params if not (fused and n in self.fused_names)]
            if fused:  # backward() runs every node, also the first layer's, which no requested gradient needs
                loss.sum().backward()
                grads = [self.params[n].grad for n in names]
                for w in self.params.values():
                    w.grad = None
            else:
                grads = torch.autograd.grad(loss.sum(), [self.params[n] for n in names])
        finally:
            self._neg_lr = None
        with torch.no_grad():
            for name, g in zip(names, grads):
                w = self.params[name]
                shape = (R,) + (1,) * (w.dim() - 1)
                # each operation as torch.optim.SGD's (add with alpha: one rounding), so a run's update is
                # bit for bit the one it makes alone
                if weight_decay is not None:
                    g = torch.addcmul(g, w, weight_decay.view(shape))
                if self.momentum != 0:
                    buf = self.momentum_buffers[name]
                    if buf is None:  # torch.optim.SGD: the first buffer is the gradient itself
                        buf = self.momentum_buffers[name] = g.clone()
                        for r, member in enumerate(self._members[name]):
                            self.optimizers[r].state[member]["momentum_buffer"] = buf[r]
                    else:
                        buf.mul_(self.momentum).add_(g)
                    g = g.add(buf, alpha=self.momentum) if self.nesterov else buf
                w.addcmul_(g, lr.view(shape), value=-1)
        return loss.detach(), logits.detach()
