"""torch-harmonics' side of `ruda bench swe --torch-harmonics PYTHON`.

Times, with torch limited to --threads threads (CPU, torch-harmonics 0.9.3):

- one step of `torch_harmonics.examples.ShallowWaterSolver` in float64 on an
  equiangular --solver grid with lmax = ceil(nlat/3) (as `PdeDataset`
  truncates it) and the time step scaled to torch-harmonics' example's CFL
  number (150 s at lmax 86): `timestep(state, --solver-steps)` from a random
  state, divided by the steps;
- one training step of `SphericalFourierNeuralOperator` in float32 on the
  --sfno grid (scale_factor 2, --embed-dim channels, --layers blocks,
  residual prediction, otherwise its defaults) on a batch of --batch:
  forward, the squared error integrated over the sphere, backward, Adam.

Prints JSON {solver_ms, train_ms, params} (medians of --iters after
--warmup; params counts a complex parameter as two, as ruda stores it).

Needs torch and torch-harmonics==0.9.3:
    pip install torch torch-harmonics==0.9.3
"""

import argparse
import json
import math
import statistics
import sys
import time
import warnings

import torch
import torch_harmonics as th
from torch_harmonics.examples import ShallowWaterSolver
from torch_harmonics.examples.models import SphericalFourierNeuralOperator
from torch_harmonics.quadrature import precompute_latitudes

warnings.filterwarnings("ignore", category=UserWarning)


def timed(warmup, iters, f):
    for _ in range(warmup):
        f()
    t = []
    for _ in range(max(iters, 1)):
        start = time.perf_counter()
        f()
        t.append((time.perf_counter() - start) * 1e3)
    return statistics.median(t)


def size(s):
    h, w = s.split("x")
    return int(h), int(w)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--solver", default="256x512")
    p.add_argument("--solver-steps", type=int, default=10)
    p.add_argument("--sfno", default="32x64")
    p.add_argument("--embed-dim", type=int, default=16)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if not th.__version__.startswith("0.9.3"):
        print(f"torch-harmonics {th.__version__}, not 0.9.3", file=sys.stderr)

    nlat, nlon = size(a.solver)
    lmax = math.ceil(nlat / 3)
    dt = 150.0 * 86.0 / lmax
    solver = ShallowWaterSolver(nlat, nlon, dt, lmax=lmax, mmax=lmax, grid="equiangular").double()
    torch.manual_seed(1)
    with torch.no_grad():
        state = solver.random_initial_condition(mach=0.2)
        n = max(a.solver_steps, 1)
        solver_ms = timed(a.warmup, a.iters, lambda: solver.timestep(state, n)) / n

    h, w = size(a.sfno)
    model = SphericalFourierNeuralOperator(
        img_size=(h, w),
        grid="equiangular",
        grid_internal="legendre-gauss",
        scale_factor=2,
        in_chans=3,
        out_chans=3,
        embed_dim=a.embed_dim,
        num_layers=a.layers,
        residual_prediction=True,
    ).float()
    params = sum(q.numel() * (2 if q.is_complex() else 1) for q in model.parameters())
    _, weights = precompute_latitudes(h, grid="equiangular")
    weights = (weights * 2 * math.pi / w / (4 * math.pi)).float().reshape(1, 1, h, 1)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(a.batch, 3, h, w)
    y = torch.randn(a.batch, 3, h, w)

    def train():
        optim.zero_grad(set_to_none=True)
        loss = (((model(x) - y) ** 2) * weights).sum() / (a.batch * 3)
        loss.backward()
        optim.step()

    train_ms = timed(a.warmup, a.iters, train)
    json.dump({"solver_ms": solver_ms, "train_ms": train_ms, "params": params}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
