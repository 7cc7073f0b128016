"""Reference values for ruda-sphere's tests from torch-harmonics.

Generated with torch-harmonics 0.9.3 on CPU torch 2.14.1, float64:

    pip install torch==2.14.1 torch-harmonics==0.9.3 numpy
    python crates/ruda-sphere/reference/torch_harmonics_reference.py \
        > crates/ruda-sphere/reference/torch_harmonics_0.9.3.json

For each small grid it records the latitude nodes and weights, the default
truncation, a random field and its `RealSHT` coefficients, and random
coefficients and their `InverseRealSHT` field. Complex values are stored as
[re, im] pairs, the layout ruda-sphere uses. The tests in
`tests/torch_harmonics.rs` compare against this file.
"""

import json
import sys
import warnings

import numpy as np
import torch
import torch_harmonics as th
from torch_harmonics.quadrature import precompute_latitudes

warnings.filterwarnings("ignore", category=UserWarning)

CASES = [
    # (nlat, nlon, grid): odd and even longitudes, the Nyquist order kept
    # (legendre-gauss 6 x 10: mmax = 6 = nlon/2 + 1), truncation by nlon.
    (7, 12, "equiangular"),
    (9, 15, "equiangular"),
    (6, 10, "legendre-gauss"),
    (5, 16, "legendre-gauss"),
]


def pairs(z):
    z = z.detach().numpy()
    return np.stack([z.real, z.imag], axis=-1).tolist()


def main():
    rng = np.random.default_rng(20260512)
    out = {
        "torch_harmonics": th.__version__,
        "torch": torch.__version__,
        "cases": [],
    }
    for nlat, nlon, grid in CASES:
        sht = th.RealSHT(nlat, nlon, grid=grid).double()
        isht = th.InverseRealSHT(nlat, nlon, grid=grid).double()
        lats, weights = precompute_latitudes(nlat, grid=grid)
        x = torch.from_numpy(rng.standard_normal((2, nlat, nlon)))
        coeffs = sht(x)
        c_re = rng.standard_normal((2, isht.lmax, isht.mmax))
        c_im = rng.standard_normal((2, isht.lmax, isht.mmax))
        c = torch.complex(torch.from_numpy(c_re), torch.from_numpy(c_im))
        field = isht(c)
        out["cases"].append(
            {
                "nlat": nlat,
                "nlon": nlon,
                "grid": grid,
                "lmax": sht.lmax,
                "mmax": sht.mmax,
                "colatitudes": lats.tolist(),
                "weights": weights.tolist(),
                "x": x.tolist(),
                "sht_x": pairs(coeffs),
                "c": np.stack([c_re, c_im], axis=-1).tolist(),
                "isht_c": field.tolist(),
            }
        )
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
