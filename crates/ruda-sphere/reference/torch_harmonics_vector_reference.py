"""Reference values for ruda-sphere's vector transforms from torch-harmonics.

Generated with torch-harmonics 0.9.3 on CPU torch 2.14.1, float64:

    pip install torch==2.14.1 torch-harmonics==0.9.3 numpy
    python crates/ruda-sphere/reference/torch_harmonics_vector_reference.py \
        > crates/ruda-sphere/reference/torch_harmonics_vector_0.9.3.json

For each small grid it records a random tangential field `[2, 2, nlat, nlon]`
((colatitude, longitude) components) and its `RealVectorSHT` coefficients
`[2, 2, lmax, mmax]` ((spheroidal, toroidal)), and random coefficients and
their `InverseRealVectorSHT` field. Complex values are stored as [re, im]
pairs, the layout ruda-sphere uses. The tests in
`tests/torch_harmonics_vector.rs` compare against this file.

torch-harmonics 0.9.3 computes `RealVectorSHT`'s normalisation
`1 / (l (l + 1))` as `1.0 / l / (l + 1)` of an integer `arange`, which torch
evaluates in float32 whatever the module's dtype: its float64 coefficients
are off by up to ~3e-8 relative. The script therefore also records
`vsht_x_f64`: the same module with that factor made in float64 (its weights
rebuilt exactly as its `__init__` does, with a float64 `arange`).
"""

import json
import sys
import warnings

import numpy as np
import torch
import torch_harmonics as th
from torch_harmonics.legendre import _precompute_dlegpoly
from torch_harmonics.quadrature import precompute_latitudes

warnings.filterwarnings("ignore", category=UserWarning)

CASES = [
    # (nlat, nlon, grid): poles included and not, odd and even latitude
    # and longitude counts, the Nyquist order kept (legendre-gauss 6 x 10).
    (7, 12, "equiangular"),
    (9, 15, "equiangular"),
    (6, 10, "legendre-gauss"),
    (5, 16, "legendre-gauss"),
]


def pairs(z):
    z = z.detach().numpy()
    return np.stack([z.real, z.imag], axis=-1).tolist()


def f64_weights(vsht):
    """`RealVectorSHT.__init__`'s weights with the degree factor in float64."""
    _, weights = precompute_latitudes(vsht.nlat, grid=vsht.grid)
    dpct = _precompute_dlegpoly(
        vsht.mmax, vsht.lmax, vsht.nlat, vsht.grid, norm=vsht.norm, csphase=vsht.csphase
    )
    weights = 2.0 * torch.pi * weights
    l = torch.arange(0, vsht.lmax, dtype=torch.float64)
    norm_factor = 1.0 / l / (l + 1)
    norm_factor[0] = 1.0
    weights = torch.einsum("dmlk,k,l->dmlk", dpct, weights, norm_factor).contiguous()
    weights[1] = -1 * weights[1]
    return weights


def main():
    rng = np.random.default_rng(20261202)
    out = {
        "torch_harmonics": th.__version__,
        "torch": torch.__version__,
        "cases": [],
    }
    for nlat, nlon, grid in CASES:
        vsht = th.RealVectorSHT(nlat, nlon, grid=grid).double()
        ivsht = th.InverseRealVectorSHT(nlat, nlon, grid=grid).double()
        x = torch.from_numpy(rng.standard_normal((2, 2, nlat, nlon)))
        coeffs = vsht(x)
        exact = th.RealVectorSHT(nlat, nlon, grid=grid).double()
        exact.weights = f64_weights(exact)
        coeffs_f64 = exact(x)
        c_re = rng.standard_normal((2, 2, ivsht.lmax, ivsht.mmax))
        c_im = rng.standard_normal((2, 2, ivsht.lmax, ivsht.mmax))
        c = torch.complex(torch.from_numpy(c_re), torch.from_numpy(c_im))
        field = ivsht(c)
        out["cases"].append(
            {
                "nlat": nlat,
                "nlon": nlon,
                "grid": grid,
                "lmax": vsht.lmax,
                "mmax": vsht.mmax,
                "x": x.tolist(),
                "vsht_x": pairs(coeffs),
                "vsht_x_f64": pairs(coeffs_f64),
                "c": np.stack([c_re, c_im], axis=-1).tolist(),
                "ivsht_c": field.tolist(),
            }
        )
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
