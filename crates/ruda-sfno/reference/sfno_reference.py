"""Reference values for ruda-sfno's SFNO from torch-harmonics.

Generated with torch-harmonics 0.9.3 and torch 2.14.1 (the PyPI wheel,
run on the CPU), float64:

    pip install torch==2.14.1 torch-harmonics==0.9.3 numpy
    python crates/ruda-sfno/reference/sfno_reference.py \
        > crates/ruda-sfno/reference/sfno_0.9.3.json

For each case it builds `torch_harmonics.examples.models.
SphericalFourierNeuralOperator` (defaults of the demo's model: no
normalisation, identity outer skips, GELU, one-layer encoder and decoder,
bias-free except the blocks' first MLP layer) with random weights, and
records, in float64:

- `params`: every parameter, in the order ruda-sfno's `Sfno` visits them
  (encoder; per block the spectral filter `[out, in, lmax]` as
  `[re, im]` pairs, the MLP's first weight and bias and second weight;
  decoder), flattened row-major with its shape;
- `input`: a batch `[b, 3, nlat, nlon]` of normal values;
- `output`: the model's output on it;
- `cotangent` and `grads`: a random `r` of the output's shape and the
  gradient of `sum(output * r)` with respect to the input and to every
  parameter (same order).

torch-harmonics 0.9.3 computes this model partly in float32 whatever its
dtype: the transforms are built `.float()` (their Legendre weights rounded
to float32, which `.double()` cannot undo), `SpectralConvS2.forward` casts
its input to float32, and its weight is complex64. The reference therefore
rebuilds the four transforms in float64 exactly as the model's `__init__`
makes them, keeps the filter weights in complex128, and runs the spectral
convolution without the cast (the same operations otherwise), so that the
comparison is at float64 round-off.
"""

import json
import math
import sys
import warnings

import torch
import torch_harmonics as th
from torch_harmonics.examples.models import SphericalFourierNeuralOperator
from torch_harmonics.examples.models import _layers

warnings.filterwarnings("ignore", category=UserWarning)

CASES = [
    # (nlat, nlon, scale_factor, embed_dim, num_layers, batch, residual_prediction)
    (17, 32, 2, 4, 3, 2, True),
    (16, 30, 2, 3, 1, 1, False),
]


def f64_forward(self, x):
    """`SpectralConvS2.forward` without its float32 cast."""
    residual = x
    x = self.forward_transform(x)
    if self.scale_residual:
        residual = self.inverse_transform(x)
    x = torch.einsum(self.contract_func, x, self.weight)
    x = self.inverse_transform(x)
    if hasattr(self, "bias"):
        x = x + self.bias
    return x, residual


def rebuild_f64(model):
    """The four transforms' buffers remade in float64 (no `.float()`)."""
    for name, shape in [
        ("trans_down", model.img_size),
        ("itrans_up", model.img_size),
        ("trans", (model.h, model.w)),
        ("itrans", (model.h, model.w)),
    ]:
        old = getattr(model, name)
        grid = model.grid if name in ("trans_down", "itrans_up") else model.grid_internal
        cls = type(old)
        fresh = cls(*shape, lmax=old.lmax, mmax=old.mmax, grid=grid).double()
        for bname, buf in fresh.named_buffers(recurse=False):
            getattr(old, bname).data = buf.data.clone()


def flat(t):
    return t.detach().reshape(-1).tolist()


def as_pairs(t):
    """A complex tensor as real values with a trailing [re, im] axis."""
    return torch.view_as_real(t.detach().resolve_conj()).contiguous()


def ordered(model):
    """(name, tensor as real) in the order ruda-sfno visits parameters."""
    out = [("encoder", model.encoder[0].weight)]
    for i, blk in enumerate(model.blocks):
        out.append((f"blocks.{i}.filter", blk.global_conv.weight))
        out.append((f"blocks.{i}.fc1.weight", blk.mlp.fwd[0].weight))
        out.append((f"blocks.{i}.fc1.bias", blk.mlp.fwd[0].bias))
        out.append((f"blocks.{i}.fc2.weight", blk.mlp.fwd[2].weight))
    out.append(("decoder", model.decoder[0].weight))
    return out


def real_view(t):
    t = t.detach()
    if t.is_complex():
        return as_pairs(t)
    if t.dim() == 4:  # a 1 × 1 convolution's [out, in, 1, 1]
        return t[:, :, 0, 0]
    return t


def case(nlat, nlon, scale, embed, layers, batch, residual, seed):
    torch.manual_seed(seed)
    model = SphericalFourierNeuralOperator(
        img_size=(nlat, nlon),
        grid="equiangular",
        grid_internal="legendre-gauss",
        scale_factor=scale,
        in_chans=3,
        out_chans=3,
        embed_dim=embed,
        num_layers=layers,
        residual_prediction=residual,
    )
    model = model.double()
    for blk in model.blocks:
        blk.global_conv.weight.data = blk.global_conv.weight.data.to(torch.complex128)
    rebuild_f64(model)
    # The decoder is drawn at torch-harmonics' scale (ruda's default
    # `decoder_scale` 1 too).
    x = torch.randn(batch, 3, nlat, nlon, dtype=torch.float64, requires_grad=True)
    y = model(x)
    r = torch.randn_like(y)
    (y * r).sum().backward()
    params = ordered(model)
    return {
        "nlat": nlat,
        "nlon": nlon,
        "scale_factor": scale,
        "embed_dim": embed,
        "num_layers": layers,
        "batch": batch,
        "residual_prediction": residual,
        "params": [
            {"name": n, "shape": list(real_view(p).shape), "values": flat(real_view(p))}
            for n, p in params
        ],
        "input": flat(x),
        "output": flat(y),
        "cotangent": flat(r),
        "grads": {
            "input": flat(x.grad),
            "params": [flat(real_view(p.grad)) for _, p in params],
        },
    }


def main():
    _layers.SpectralConvS2.forward = f64_forward
    torch.set_num_threads(1)
    out = {
        "torch_harmonics": th.__version__,
        "torch": torch.__version__,
        "cases": [case(*c, seed=100 + i) for i, c in enumerate(CASES)],
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
