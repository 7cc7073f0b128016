"""torch-harmonics' side of `ruda bench sht --torch-harmonics PYTHON`.

Times RealSHT followed by InverseRealSHT (with --vector, RealVectorSHT and
InverseRealVectorSHT on fields of two components; torch-harmonics 0.9.3,
CPU, no autograd) on equiangular grids, the same channels, iterations and warm-up
as the ruda side, with torch limited to --threads threads, and prints a JSON
list of {nlat, nlon, lmax, dtype, threads, ms} (the median time).

Needs torch and torch-harmonics==0.9.3:
    pip install torch torch-harmonics==0.9.3
"""

import argparse
import json
import statistics
import sys
import time
import warnings

import torch
import torch_harmonics as th

warnings.filterwarnings("ignore", category=UserWarning)


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
    torch.set_num_threads(a.threads)
    if not th.__version__.startswith("0.9.3"):
        print(f"torch-harmonics {th.__version__}, not 0.9.3", file=sys.stderr)
    out = []
    for size in a.sizes.split(","):
        nlat, nlon = (int(v) for v in size.split("x"))
        for name in a.dtypes.split(","):
            dtype = {"f32": torch.float32, "f64": torch.float64}[name]
            if a.vector:
                sht = th.RealVectorSHT(nlat, nlon, grid="equiangular").to(dtype)
                isht = th.InverseRealVectorSHT(nlat, nlon, grid="equiangular").to(dtype)
                x = torch.randn(a.channels, 2, nlat, nlon, dtype=dtype)
            else:
                sht = th.RealSHT(nlat, nlon, grid="equiangular").to(dtype)
                isht = th.InverseRealSHT(nlat, nlon, grid="equiangular").to(dtype)
                x = torch.randn(a.channels, nlat, nlon, dtype=dtype)
            times = []
            with torch.no_grad():
                for i in range(a.warmup + a.iters):
                    t = time.perf_counter()
                    y = isht(sht(x))
                    dt = time.perf_counter() - t
                    if i >= a.warmup:
                        times.append(dt)
            assert y.shape == x.shape
            out.append(
                {
                    "nlat": nlat,
                    "nlon": nlon,
                    "lmax": sht.lmax,
                    "dtype": name,
                    "threads": torch.get_num_threads(),
                    "ms": statistics.median(times) * 1e3,
                }
            )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
