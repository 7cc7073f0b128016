"""Reference values for ruda-sphere's shallow-water solver from torch-harmonics.

Generated with torch-harmonics 0.9.3 on CPU torch 2.14.1, float64:

    pip install torch==2.14.1 torch-harmonics==0.9.3 numpy
    python crates/ruda-sphere/reference/shallow_water_reference.py \
        > crates/ruda-sphere/reference/shallow_water_0.9.3.json

For each case it builds `torch_harmonics.examples.ShallowWaterSolver` in
float64 (its transforms without the Condon-Shortley phase, as the solver
makes them) and records, as spectral coefficients `[3, lmax, mmax]`
((geopotential, vorticity, divergence), complex values as [re, im] pairs,
the layout ruda-sphere uses):

- `random` (per case): a random state drawn here with numpy as
  `random_initial_condition(mach=0.2)` draws it (torch's generator cannot be
  replayed elsewhere);
- `f64.galewsky`: `galewsky_initial_condition()`;
- `f64.galewsky_run.dudt`: `dudtspec` of it, and `f64.galewsky_run.steps`:
  `timestep(galewsky, n)` for each of the case's `counts`;
- `f64.random_run`: the same for the random state;
- `as_shipped.galewsky` and `as_shipped.galewsky_run.steps` (the last count
  only): the module as shipped (see below).

torch-harmonics 0.9.3 computes `RealVectorSHT`'s normalisation
`1 / (l (l + 1))` in float32 whatever the module's dtype (see
`torch_harmonics_vector_reference.py`), which perturbs every vorticity and
divergence by up to ~3e-8 relative; and `galewsky_initial_condition` makes
its constants (the jet's edges `phi0`, `phi1` and its scale `en`) with
`torch.asarray` of Python floats, float32 under torch's default dtype,
which moves the jet by ~1e-7 relative. Each case is therefore run with that
factor made in float64 (`f64`: the module's weights rebuilt exactly as its
`__init__` does, with a float64 `arange`) and the Galewsky constants in
float64 (`torch.set_default_dtype(torch.float64)` around the call), and the
Galewsky initial state and last step also `as_shipped`.
The tests compare ruda with `f64` at round-off and with `as_shipped` at the
size of that float32 factor.

It also records one scalar transform without the Condon-Shortley phase
(`csphase`): a random field and its `RealSHT(csphase=False)` coefficients.
"""

import json
import math
import sys
import warnings

import numpy as np
import torch
import torch_harmonics as th
from torch_harmonics.examples import ShallowWaterSolver

# The float64 degree factor, as the vector transform's reference makes it.
from torch_harmonics_vector_reference import f64_weights

warnings.filterwarnings("ignore", category=UserWarning)

CASES = [
    # (nlat, nlon, grid, lmax, dt seconds, step counts recorded)
    (36, 72, "equiangular", 12, 600.0, [1, 2, 36]),
    (24, 48, "legendre-gauss", 8, 900.0, [1, 2, 24]),
]


def pairs(z):
    z = z.detach().numpy()
    return np.stack([z.real, z.imag], axis=-1).tolist()


def random_state(rng, solver):
    """`random_initial_condition(mach=0.2)`'s draw, with numpy's generator."""
    lmax, mmax = solver.lmax, solver.mmax
    llimit = mlimit = 120
    lk, mk = min(llimit, lmax), min(mlimit, mmax)
    z = rng.standard_normal((3, lk, mk)) + 1j * rng.standard_normal((3, lk, mk))
    # torch.randn_like on complex draws each part with variance 1/2.
    z = z / math.sqrt(2.0)
    u = np.zeros((3, lmax, mmax), dtype=np.complex128)
    u[:, :lk, :mk] = math.sqrt(4 * math.pi / llimit / (llimit + 1)) * z
    g, hamp, havg, r = 9.80616, 120.0, 10.0e3, 6.37122e6
    u[0] = g * hamp * u[0]
    u[0, 0, 0] += math.sqrt(4 * math.pi) * havg * g
    u[1:] = 0.2 * u[1:] * math.sqrt(g * havg) / r
    return torch.tril(torch.from_numpy(u))


def run(solver, state, counts):
    out = {"dudt": pairs(solver.dudtspec(state.clone())), "steps": {}}
    for n in counts:
        out["steps"][str(n)] = pairs(solver.timestep(state.clone(), n))
    return out


def last(solver, state, counts):
    n = counts[-1]
    return {"steps": {str(n): pairs(solver.timestep(state.clone(), n))}}


def main():
    rng = np.random.default_rng(20261203)
    out = {
        "torch_harmonics": th.__version__,
        "torch": torch.__version__,
        "cases": [],
    }
    for nlat, nlon, grid, lmax, dt, counts in CASES:
        case = {
            "nlat": nlat,
            "nlon": nlon,
            "grid": grid,
            "lmax": lmax,
            "dt": dt,
            "counts": counts,
        }
        shipped = ShallowWaterSolver(nlat, nlon, dt, lmax=lmax, mmax=lmax, grid=grid).double()
        exact = ShallowWaterSolver(nlat, nlon, dt, lmax=lmax, mmax=lmax, grid=grid).double()
        exact.vsht.weights = f64_weights(exact.vsht)
        rand = random_state(rng, shipped)
        case["random"] = pairs(rand)
        with torch.no_grad():
            # The Galewsky constants are made with torch.asarray of Python
            # floats: float32 under torch's default dtype.
            torch.set_default_dtype(torch.float64)
            g = exact.galewsky_initial_condition()
            torch.set_default_dtype(torch.float32)
            case["f64"] = {
                "galewsky": pairs(g),
                "galewsky_run": run(exact, g, counts),
                "random_run": run(exact, rand, counts),
            }
            g = shipped.galewsky_initial_condition()
            case["as_shipped"] = {
                "galewsky": pairs(g),
                "galewsky_run": last(shipped, g, counts),
            }
        out["cases"].append(case)
    x = torch.from_numpy(rng.standard_normal((2, 9, 16)))
    sht = th.RealSHT(9, 16, grid="equiangular", csphase=False).double()
    out["csphase"] = {"nlat": 9, "nlon": 16, "x": x.tolist(), "sht_x": pairs(sht(x))}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
