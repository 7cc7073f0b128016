"""SHTns' side of `ruda bench sht --shtns PYTHON`.

Times SHTns' analysis followed by its synthesis (`sht.analys`, `sht.synth`;
with --vector the spheroidal/toroidal pair `spat_to_SHsphtor`,
`SHsphtor_to_spat`) on equiangular grids with poles (`sht_reg_poles`, as
ruda-sphere's equiangular grids), longitude contiguous
(`SHT_PHI_CONTIGUOUS`), polar optimisation threshold 1e-10 (SHTns'
default), orthonormal functions, band limit lmax = mmax = (nlat + 1) // 2 - 1
(the same modes as ruda-sphere's (nlat + 1) / 2 degrees), one call per
channel, with --threads OpenMP threads (SHTns' own count), the same
iterations and warm-up as the ruda side. SHTns computes in f64 only: an
f32 request is timed in f64 and reported as f64 (so the table shows it
beside ruda's f64 rows). Prints a JSON list of {nlat, nlon, lmax, dtype,
threads, ms} (the median time; lmax counts degrees, as ruda's table does)
and, on stderr, SHTns' own build line.

Needs shtns (pip install shtns, with libfftw3-dev: it builds for this CPU)
and numpy.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


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
    # SHTns' C library prints its build line on standard output: send the
    # process's standard output to standard error, and the JSON to the
    # original one.
    sys.stdout.flush()
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import shtns  # prints its build line when loaded

    rng = np.random.default_rng(1)
    out = []
    # SHTns has f64 only: it is timed once per size, as f64.
    for size in a.sizes.split(","):
        nlat, nlon = (int(v) for v in size.split("x"))
        degrees = (nlat + 1) // 2
        lmax = degrees - 1
        if nlon < 2 * lmax + 1 or nlat <= lmax:
            print(f"SHTns needs nlon >= 2 lmax + 1 and nlat > lmax: skipping {nlat}x{nlon}", file=sys.stderr)
            continue
        sh = shtns.sht(lmax, lmax, 1, shtns.sht_orthonormal, a.threads)
        sh.set_grid(nlat, nlon, shtns.sht_reg_poles | shtns.SHT_PHI_CONTIGUOUS, 1e-10)
        ncomp = 2 if a.vector else 1
        fields = [
            [np.ascontiguousarray(rng.standard_normal((nlat, nlon))) for _ in range(ncomp)]
            for _ in range(a.channels)
        ]
        for f in fields:
            for c in f:
                assert c.shape == sh.spat_array().shape, (c.shape, sh.spat_array().shape)
        slm, tlm = sh.spec_array(), sh.spec_array()
        vt, vp = sh.spat_array(), sh.spat_array()
        times = []
        for i in range(a.warmup + a.iters):
            t = time.perf_counter()
            for f in fields:
                if a.vector:
                    sh.spat_to_SHsphtor(f[0], f[1], slm, tlm)
                    sh.SHsphtor_to_spat(slm, tlm, vt, vp)
                else:
                    sh.synth(sh.analys(f[0]))
            dt = time.perf_counter() - t
            if i >= a.warmup:
                times.append(dt)
        out.append(
            {
                "nlat": nlat,
                "nlon": nlon,
                "lmax": degrees,
                "dtype": "f64",
                "threads": a.threads,
                "ms": statistics.median(times) * 1e3,
            }
        )
    json.dump(out, answer)
    answer.flush()


if __name__ == "__main__":
    main()
