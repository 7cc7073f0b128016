"""ducc0's side of `ruda bench sht --ducc0 PYTHON`.

Times ducc0.sht.experimental.analysis_2d followed by synthesis_2d (spin 0;
with --vector, spin 1 on fields of two components) on equiangular grids with poles (geometry "CC", Clenshaw-Curtis, as
ruda-sphere's and torch-harmonics' equiangular grids), band limit
lmax = mmax = (nlat + 1) // 2 - 1 (the same modes as ruda-sphere's
(nlat + 1) / 2 degrees), one call per channel, with --threads threads, the
same iterations and warm-up as the ruda side; prints a JSON list of
{nlat, nlon, lmax, dtype, threads, ms} (the median time; lmax counts
degrees, as ruda's table does).

Needs ducc0 (pip install ducc0) and numpy.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np
import ducc0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="91x180,181x360,361x720")
    p.add_argument("--dtypes", default="f32,f64")
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vector", action="store_true")
    a = p.parse_args()
    spin, ncomp = (1, 2) if a.vector else (0, 1)
    sht = ducc0.sht.experimental
    rng = np.random.default_rng(1)
    out = []
    for size in a.sizes.split(","):
        nlat, nlon = (int(v) for v in size.split("x"))
        degrees = (nlat + 1) // 2
        lmax = degrees - 1
        if nlon < 2 * lmax + 1:
            print(f"ducc0 needs nlon >= 2 lmax + 1: skipping {nlat}x{nlon}", file=sys.stderr)
            continue
        for name in a.dtypes.split(","):
            dtype = {"f32": np.float32, "f64": np.float64}[name]
            x = rng.standard_normal((a.channels, ncomp, nlat, nlon)).astype(dtype)
            times = []
            for i in range(a.warmup + a.iters):
                t = time.perf_counter()
                for c in range(a.channels):
                    alm = sht.analysis_2d(
                        map=x[c], spin=spin, lmax=lmax, mmax=lmax,
                        geometry="CC", nthreads=a.threads,
                    )
                    y = sht.synthesis_2d(
                        alm=alm, spin=spin, lmax=lmax, mmax=lmax,
                        geometry="CC", ntheta=nlat, nphi=nlon, nthreads=a.threads,
                    )
                dt = time.perf_counter() - t
                if i >= a.warmup:
                    times.append(dt)
            assert y.shape == x[0].shape, (y.shape, x[0].shape)
            out.append(
                {
                    "nlat": nlat,
                    "nlon": nlon,
                    "lmax": degrees,
                    "dtype": name,
                    "threads": a.threads,
                    "ms": statistics.median(times) * 1e3,
                }
            )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
