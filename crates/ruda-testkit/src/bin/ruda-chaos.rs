//! `ruda-chaos`: randomized programs of collectives and differentiable
//! primitives on random process grids, with one injected fault each — a
//! panic (before or after a step, or inside a backward pass), a rank that
//! skips a call, passes wrong sizes, calls another operation, or arrives
//! after the deadline — checking that every run ends within its deadline
//! with the documented error on every live rank.
//!
//! ```text
//! ruda-chaos [--programs N] [--seed S] [--timeout-ms T] [--quiet]   # local transport
//! mpirun -n N ruda-chaos --mpi --seed S                                # one program per job (feature mpi)
//! ```
//!
//! Exit status 0 when every program behaved; 1 (with the program's seed and
//! what went wrong) otherwise, including a hang (a program that does not
//! end within a generous watchdog).

use ruda_tensor::TransposeAxes;
use std::fmt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use burn_core::module::Param;
use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_bench::mix;
use ruda_comm::{CommError, Communicator, LocalWorld, PeerFailureCause, RankError, ReduceOp};
use ruda_tensor::ddp::{GradientReduction, Overlap};
use ruda_tensor::ops::{LinearOp, Role, apply};
use ruda_tensor::{Error, Exchange, Group, ProcessGrid, TensorExt, TensorOp, recv, try_backward};

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = mix(&[self.0, 0x9e37_79b9]);
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Axis {
    World,
    Polar,
    Azimuth,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    RawAllReduce,
    RawAllGatherV,
    AllReduce(Axis),
    AllGather(Axis),
    ReduceScatter(Axis),
    Transpose,
    Halo,
    CopyReduce(Axis),
    Tripwire,
    Backward,
    /// `all_reduce_with(Max)`: gradients to the ranks holding the maximum.
    Extremum(Axis),
    /// Even world ranks send to the next odd one (`send` / `recv`).
    Relay,
    /// `reduce` to the group's last rank (zeros elsewhere; the backward
    /// pass broadcasts the root's gradient).
    Rooted(Axis),
    /// A ring shift over the world through an `Exchange`: every rank posts
    /// its send to the next and its receive from the previous, then waits.
    Ring,
    /// `gather_to_root` at the group's last rank (uneven rows), then
    /// `scatter_from_root` back in balanced chunks.
    RootedRows(Axis),
    /// A data-parallel gradient reduction during the backward pass
    /// (`ddp::Overlap`) of a one-parameter module over the world.
    Overlap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    Before,
    After,
    InBackward,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    Panic {
        rank: usize,
        step: usize,
        when: When,
    },
    Skip {
        rank: usize,
        step: usize,
    },
    WrongSize {
        rank: usize,
        step: usize,
    },
    WrongOp {
        rank: usize,
        step: usize,
    },
    Late {
        rank: usize,
        step: usize,
    },
}

impl Fault {
    fn kind(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Panic { .. } => "panic",
            Fault::Skip { .. } => "skip",
            Fault::WrongSize { .. } => "wrong size",
            Fault::WrongOp { .. } => "wrong op",
            Fault::Late { .. } => "late",
        }
    }
    /// The same fault after a step was inserted at `at`.
    fn shifted(self, at: usize) -> Fault {
        let bump = |s: usize| if s >= at { s + 1 } else { s };
        match self {
            Fault::None => Fault::None,
            Fault::Panic { rank, step, when } => Fault::Panic {
                rank,
                step: bump(step),
                when,
            },
            Fault::Skip { rank, step } => Fault::Skip {
                rank,
                step: bump(step),
            },
            Fault::WrongSize { rank, step } => Fault::WrongSize {
                rank,
                step: bump(step),
            },
            Fault::WrongOp { rank, step } => Fault::WrongOp {
                rank,
                step: bump(step),
            },
            Fault::Late { rank, step } => Fault::Late {
                rank,
                step: bump(step),
            },
        }
    }

    /// The step the fault hits, if any.
    fn at_step(&self) -> Option<usize> {
        match *self {
            Fault::None => None,
            Fault::Panic { step, .. }
            | Fault::Skip { step, .. }
            | Fault::WrongSize { step, .. }
            | Fault::WrongOp { step, .. }
            | Fault::Late { step, .. } => Some(step),
        }
    }

    fn at(&self, rank: usize, step: usize) -> Option<Fault> {
        let hit = match *self {
            Fault::None => false,
            Fault::Panic {
                rank: r, step: s, ..
            }
            | Fault::Skip { rank: r, step: s }
            | Fault::WrongSize { rank: r, step: s }
            | Fault::WrongOp { rank: r, step: s }
            | Fault::Late { rank: r, step: s } => r == rank && s == step,
        };
        hit.then_some(*self)
    }
}

/// Zero-size data a program runs on (besides its fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Empty {
    /// Every tensor has its usual sizes.
    None,
    /// An empty batch: every tensor step's inner axis has size zero on
    /// every rank (a wrong size on one rank still shows as 1 vs 0).
    Batch,
    /// This world rank holds no rows where ranks' rows may differ (its
    /// all-gather block, its transpose columns).
    Rank(usize),
}

#[derive(Clone, Debug)]
struct Program {
    seed: u64,
    polar: usize,
    azimuth: usize,
    steps: Vec<Step>,
    fault: Fault,
    empty: Empty,
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} grid {}x{} steps {:?} fault {:?} empty {:?}",
            self.seed, self.polar, self.azimuth, self.steps, self.fault, self.empty
        )
    }
}

const GRIDS: [(usize, usize); 8] = [
    (1, 1),
    (2, 1),
    (1, 2),
    (2, 2),
    (3, 1),
    (1, 3),
    (3, 2),
    (2, 3),
];

fn generate(seed: u64) -> Program {
    let mut g = Rng(seed);
    let (polar, azimuth) = GRIDS[g.below(GRIDS.len())];
    let n = polar * azimuth;
    let axis = |g: &mut Rng| [Axis::World, Axis::Polar, Axis::Azimuth][g.below(3)];
    let len = 2 + g.below(6);
    let mut steps: Vec<Step> = (0..len)
        .map(|_| match g.below(9) {
            0 => Step::RawAllReduce,
            1 => Step::RawAllGatherV,
            2 => Step::AllReduce(axis(&mut g)),
            3 => Step::AllGather(axis(&mut g)),
            4 => Step::ReduceScatter(axis(&mut g)),
            5 => Step::Transpose,
            6 => Step::Halo,
            7 => Step::CopyReduce(axis(&mut g)),
            _ => Step::Backward,
        })
        .collect();
    steps.push(Step::Backward);
    let rank = g.below(n);
    let fault = match g.below(8) {
        0 | 1 => Fault::None,
        2 => {
            let step = g.below(steps.len());
            let when = [When::Before, When::After][g.below(2)];
            Fault::Panic { rank, step, when }
        }
        3 => {
            // A tripwire whose backward panics on `rank`, before the last backward.
            let step = g.below(steps.len() - 1);
            steps.insert(step, Step::Tripwire);
            Fault::Panic {
                rank,
                step,
                when: When::InBackward,
            }
        }
        4 => Fault::Skip {
            rank,
            step: g.below(steps.len()),
        },
        5 => {
            let candidates: Vec<usize> = (0..steps.len()).filter(|&s| sizeable(steps[s])).collect();
            match candidates.len() {
                0 => Fault::None,
                k => Fault::WrongSize {
                    rank,
                    step: candidates[g.below(k)],
                },
            }
        }
        6 => Fault::WrongOp {
            rank,
            step: g.below(steps.len()),
        },
        _ => Fault::Late {
            rank,
            step: g.below(steps.len()),
        },
    };
    // Drawn last, so that the other draws of a seed stay as they were.
    let empty = match g.below(4) {
        0 => Empty::Batch,
        1 => Empty::Rank(g.below(n)),
        _ => Empty::None,
    };
    // Then the operations of issue 18: one more step, inserted before the
    // final backward pass (the fault moves with the step it was drawn for).
    let added = match g.below(3) {
        0 => None,
        1 => Some(Step::Extremum(axis(&mut g))),
        _ => Some(Step::Relay),
    };
    let mut fault = fault;
    if let Some(step) = added {
        let at = g.below(steps.len());
        steps.insert(at, step);
        fault = fault.shifted(at);
    }
    // Then issue 27's rooted sum, in one program of four (drawn after every
    // other draw, so that earlier seeds keep their other draws).
    if g.below(4) == 0 {
        let a = axis(&mut g);
        let at = g.below(steps.len());
        steps.insert(at, Step::Rooted(a));
        fault = fault.shifted(at);
    }
    // Then issue 27's rooted gather and scatter, in one program of four.
    if g.below(4) == 0 {
        let a = axis(&mut g);
        let at = g.below(steps.len());
        steps.insert(at, Step::RootedRows(a));
        fault = fault.shifted(at);
    }
    // Then issue 27's exchange ring, in one program of four (drawn last).
    if g.below(4) == 0 {
        let at = g.below(steps.len());
        steps.insert(at, Step::Ring);
        fault = fault.shifted(at);
    }
    // Then, in one program of three that has one of issue 27's steps, the
    // fault is aimed at one of them (the faults above are drawn before
    // these steps exist).
    let aims: Vec<usize> = (0..steps.len())
        .filter(|&s| matches!(steps[s], Step::Rooted(_) | Step::RootedRows(_) | Step::Ring))
        .collect();
    if !aims.is_empty() && g.below(3) == 0 {
        let step = aims[g.below(aims.len())];
        let rank = g.below(n);
        fault = match g.below(5) {
            0 => Fault::Skip { rank, step },
            1 => Fault::WrongOp { rank, step },
            2 => Fault::Late { rank, step },
            3 if sizeable(steps[step]) => Fault::WrongSize { rank, step },
            _ => Fault::Panic {
                rank,
                step,
                when: [When::Before, When::After][g.below(2)],
            },
        };
    }
    // Then issue 27's overlapped reduction, in one program of four (drawn
    // after every other draw), with the fault aimed at it in one of two.
    if g.below(4) == 0 {
        let at = g.below(steps.len());
        steps.insert(at, Step::Overlap);
        fault = fault.shifted(at);
        if g.below(2) == 0 {
            let rank = g.below(n);
            fault = match g.below(5) {
                0 => Fault::Skip { rank, step: at },
                1 => Fault::WrongOp { rank, step: at },
                2 => Fault::Late { rank, step: at },
                3 => Fault::WrongSize { rank, step: at },
                _ => Fault::Panic {
                    rank,
                    step: at,
                    when: [When::Before, When::After][g.below(2)],
                },
            };
        }
    }
    Program {
        seed,
        polar,
        azimuth,
        steps,
        fault,
        empty,
    }
}

/// Whether a wrong size at this step is visible to the other ranks (a sum
/// of a whole tensor, say, hides it).
fn sizeable(s: Step) -> bool {
    matches!(
        s,
        Step::RawAllReduce
            | Step::RawAllGatherV
            | Step::AllReduce(_)
            | Step::AllGather(_)
            | Step::ReduceScatter(_)
            | Step::Transpose
            | Step::Halo
            | Step::Extremum(_)
            | Step::Rooted(_)
            | Step::RootedRows(_)
            | Step::Overlap
    )
}

/// An identity whose backward pass panics on one rank: a fault inside
/// Burn's backward, injected through ruda's own extension point. The
/// forward is disarmed (`panic_on: None`) and hands `armed` to its adjoint,
/// so the panic happens in the backward pass, not before it.
#[derive(Clone, Debug)]
struct Tripwire {
    panic_on: Option<usize>,
    armed: Option<usize>,
}

impl LinearOp for Tripwire {
    type Plan = ();
    type Adjoint = Tripwire;
    fn role(&self) -> Role {
        Role::forward(TensorOp::CopyTo)
    }
    fn plan<G: Group>(
        &self,
        _: &G,
        _: &[usize],
        _: burn_backend::DType,
        _: bool,
    ) -> Result<(), Error> {
        Ok(())
    }
    fn forward<B: burn_backend::Backend, G: Group>(
        &self,
        g: &G,
        _: &(),
        x: burn_backend::tensor::FloatTensor<B>,
    ) -> Result<burn_backend::tensor::FloatTensor<B>, Error> {
        if self.panic_on == Some(g.rank()) {
            panic!("chaos: rank {} panics inside the backward pass", g.rank());
        }
        Ok(x)
    }
    fn adjoint(&self, _: &()) -> Tripwire {
        Tripwire {
            panic_on: self.armed,
            armed: None,
        }
    }
}

fn tensor<const D: usize>(v: Vec<f64>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v, shape), (device, DType::F64))
}

fn ramp(len: usize, salt: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((i * 7 + salt * 3) % 11) as f64 / 4.0 - 1.0)
        .collect()
}

/// What one rank's run ended with.
type Outcome = Result<Option<f64>, Error>;

/// Run `prog` as world rank `me` over `world`; the last loss on success.
fn run_rank<C: Communicator + fmt::Debug + 'static>(
    world: C,
    prog: &Program,
    timeout: Duration,
) -> Outcome {
    let me = world.rank();
    let raw = world.split(Some(0), 0)?.expect("a colour");
    let grid = ProcessGrid::new(world, prog.polar, prog.azimuth)?;
    let group = |a: Axis| match a {
        Axis::World => grid.world(),
        Axis::Polar => grid.polar(),
        Axis::Azimuth => grid.azimuth(),
    };
    let dev = Device::flex().autodiff();
    let mut acc: Option<Tensor<1>> = None;
    let mut last = None;
    for (s, &step) in prog.steps.iter().enumerate() {
        let fault = prog.fault.at(me, s);
        let extra = usize::from(matches!(fault, Some(Fault::WrongSize { .. })));
        match fault {
            Some(Fault::Skip { .. }) => continue,
            Some(Fault::Late { .. }) => std::thread::sleep(timeout + Duration::from_millis(150)),
            Some(Fault::Panic {
                when: When::Before, ..
            }) => panic!("chaos: rank {me} panics before step {s}"),
            _ => {}
        }
        if matches!(fault, Some(Fault::WrongOp { .. })) {
            // Another collective than the others' at this position.
            match step {
                Step::RawAllReduce | Step::RawAllGatherV => {
                    let x = tensor(vec![1.0; 2], [2], &dev).detach();
                    x.all_reduce(grid.world())?;
                }
                _ => raw.barrier()?,
            }
            continue;
        }
        let leaf = |v: Vec<f64>, shape: [usize; 2]| tensor(v, shape, &dev).require_grad();
        // The program's zero-size data: an inner axis of zero everywhere,
        // or no rows on one rank where rows may differ.
        let inner = |size: usize| if prog.empty == Empty::Batch { 0 } else { size };
        let no_rows = prog.empty == Empty::Rank(me);
        let out: Option<Tensor<1>> = match step {
            Step::RawAllReduce => {
                let mut v = vec![me as f64; 5 + extra];
                raw.all_reduce(&mut v, ReduceOp::Sum)?;
                None
            }
            Step::RawAllGatherV => {
                let n = raw.size();
                let counts: Vec<usize> = (0..n)
                    .map(|r| r + 1 + usize::from(r == me) * extra)
                    .collect();
                let mut out = vec![0u32; counts.iter().sum()];
                raw.all_gather_v(&vec![me as u32; counts[me]], &mut out, &counts)?;
                None
            }
            Step::AllReduce(a) => Some(
                leaf(ramp(3 * (inner(4) + extra), me), [3, inner(4) + extra])
                    .all_reduce(group(a))?
                    .sum(),
            ),
            Step::AllGather(a) => {
                let k = if no_rows { 0 } else { 2 + group(a).rank() };
                Some(
                    leaf(ramp(k * (inner(3) + extra), me), [k, inner(3) + extra])
                        .all_gather(group(a), 0)?
                        .sum(),
                )
            }
            Step::ReduceScatter(a) => {
                let rows = group(a).size() + 1;
                Some(
                    leaf(
                        ramp(rows * (inner(3) + extra), me),
                        [rows, inner(3) + extra],
                    )
                    .reduce_scatter(group(a), 0)?
                    .sum(),
                )
            }
            Step::Transpose => {
                let w = if no_rows { 0 } else { 2 + grid.azimuth_rank() };
                let c = inner(3) + extra;
                let x = tensor(ramp(4 * c * w, me), [4, c, w], &dev).require_grad();
                Some(
                    x.transpose_over(
                        grid.azimuth(),
                        TransposeAxes {
                            split_in: 2,
                            split_out: 0,
                        },
                    )?
                    .sum()
                    .reshape([1]),
                )
            }
            Step::Halo => {
                let h = 2 + grid.polar_rank() % 2;
                Some(
                    leaf(ramp(h * (inner(5) + extra), me), [h, inner(5) + extra])
                        .halo_exchange(grid.polar(), 0, 1)?
                        .sum(),
                )
            }
            Step::CopyReduce(a) => {
                let w = tensor(vec![0.5, 1.5], [2], &dev).require_grad();
                Some(w.copy_to(group(a))?.sum().reduce_from(group(a))?)
            }
            Step::Rooted(a) => Some(
                leaf(ramp(3 * (inner(4) + extra), me), [3, inner(4) + extra])
                    .reduce(group(a), group(a).size() - 1)?
                    .sum(),
            ),
            Step::Extremum(a) => Some(
                leaf(ramp(3 * (inner(4) + extra), me), [3, inner(4) + extra])
                    .all_reduce_with(group(a), ReduceOp::Max)?
                    .sum(),
            ),
            Step::Relay => {
                let w = grid.world();
                let (wr, n) = (w.rank(), w.size());
                if wr % 2 == 0 && wr + 1 < n {
                    let x = leaf(ramp(2 * inner(3), me), [2, inner(3)]);
                    Some(x.send(w, wr + 1)?.sum())
                } else if wr % 2 == 1 {
                    let y: Tensor<2> = recv(w, wr - 1, &dev)?;
                    Some((y.clone() * y).sum())
                } else {
                    // The odd rank out has nothing to relay, but takes part
                    // in the loss like every rank.
                    Some(leaf(vec![0.0], [1, 1]).sum())
                }
            }
            Step::RootedRows(a) => {
                let k = if no_rows { 0 } else { 1 + group(a).rank() % 3 };
                let root = group(a).size() - 1;
                let all = leaf(ramp(k * (inner(3) + extra), me), [k, inner(3) + extra])
                    .gather_to_root(group(a), root, 0)?;
                Some(all.scatter_from_root(group(a), root, 0)?.sum())
            }
            Step::Ring => {
                let w = grid.world();
                let (wr, n) = (w.rank(), w.size());
                if n == 1 {
                    Some(leaf(vec![0.0], [1, 1]).sum())
                } else {
                    // Untracked: the ring moves values only (its gradients
                    // are tested in tests/exchange.rs).
                    let x = tensor(ramp(2 * inner(3), me), [2, inner(3)], &dev);
                    let ex = Exchange::new(w);
                    ex.isend(x, (wr + 1) % n)?;
                    let y = ex.irecv::<2>((wr + n - 1) % n, &dev)?.wait()?;
                    // Plus a tracked zero, so that a loss of this step
                    // alone still has a backward pass.
                    Some((y.clone() * y).sum() + leaf(vec![0.0], [1, 1]).sum())
                }
            }
            Step::Overlap => {
                // One parameter, the same on every rank (its size is what
                // a wrong size changes), a loss over this rank's rows.
                let w = grid.world();
                let cols = inner(3) + extra;
                let rows = if no_rows { 0 } else { 2 };
                let value = tensor(ramp(cols, 7), [1, cols], &dev).require_grad();
                let param = Param::from_tensor(value);
                let mut overlap = Overlap::new(w)?;
                let step = overlap.attach(&param, GradientReduction::Sum)?;
                let x = tensor(ramp(rows * cols, me), [rows, cols], &dev);
                let loss = (x * step.module().val()).sum();
                let grads = step.backward(loss)?;
                // The reduced gradient (the same on every rank) joins the
                // loss as a value, with a tracked zero so that a loss of
                // this step alone still has a backward pass.
                let g = match grads.get::<2>(param.id) {
                    Some(g) => g.sum().into_data().convert::<f64>().try_to_vec::<f64>(),
                    None => Ok(vec![0.0]),
                }
                .expect("f64");
                Some(tensor(g, [1], &dev) + leaf(vec![0.0], [1, 1]).sum())
            }
            Step::Tripwire => {
                let panic_on = match prog.fault {
                    Fault::Panic {
                        rank,
                        step,
                        when: When::InBackward,
                    } if step == s => Some(rank),
                    _ => None,
                };
                let x = leaf(ramp(3, me), [1, 3]);
                let y = routed_tripwire(x, grid.world(), panic_on)?;
                Some(y.sum())
            }
            Step::Backward => {
                if let Some(total) = acc.take() {
                    let loss = total.reduce_from(grid.world())?;
                    last = Some(
                        loss.clone()
                            .into_data()
                            .convert::<f64>()
                            .try_to_vec::<f64>()
                            .expect("f64")[0],
                    );
                    try_backward(|| loss.backward())?;
                }
                None
            }
        };
        if let Some(o) = out {
            acc = Some(match acc {
                Some(a) => a + o,
                None => o,
            });
        }
        if matches!(
            fault,
            Some(Fault::Panic {
                when: When::After,
                ..
            })
        ) {
            panic!("chaos: rank {me} panics after step {s}");
        }
    }
    Ok(last)
}

/// The tripwire on a user-facing tensor (Autodiff<Flex>).
fn routed_tripwire<G: Group>(
    x: Tensor<2>,
    g: &G,
    panic_on: Option<usize>,
) -> Result<Tensor<2>, Error> {
    type Ad = burn_autodiff::Autodiff<burn_flex::Flex>;
    let t = x
        .try_into_primitive::<Ad>()
        .expect("an Autodiff<Flex> tensor");
    let wire = Tripwire {
        panic_on: None,
        armed: panic_on,
    };
    let y = apply::<Ad, G, Tripwire>(g, wire, t)?;
    Ok(Tensor::from_primitive::<Ad>(y))
}

/// Ranks in the group a step runs on.
fn group_size(prog: &Program, step: Step) -> usize {
    let axis = |a: Axis| match a {
        Axis::World => prog.polar * prog.azimuth,
        Axis::Polar => prog.polar,
        Axis::Azimuth => prog.azimuth,
    };
    match step {
        Step::AllReduce(a)
        | Step::AllGather(a)
        | Step::ReduceScatter(a)
        | Step::CopyReduce(a)
        | Step::Extremum(a)
        | Step::Rooted(a)
        | Step::RootedRows(a) => axis(a),
        Step::Transpose => prog.azimuth,
        Step::Halo => prog.polar,
        _ => prog.polar * prog.azimuth,
    }
}

/// Whether world rank `r`'s outcome is one the fault allows (`mpi`: the
/// ranks are MPI processes). `Err` names the violation.
fn judge_rank(
    prog: &Program,
    r: usize,
    o: &Result<Outcome, String>,
    mpi: bool,
) -> Result<(), String> {
    let peer_failed = |e: &Error, panicked: bool| match e {
        Error::Comm(CommError::PeerFailure { cause, .. }) => {
            (*cause == PeerFailureCause::Panicked) == panicked
        }
        _ => false,
    };
    let injected_panic = matches!(prog.fault, Fault::Panic { rank, .. } if rank == r);
    match o {
        Err(msg) if injected_panic && msg.contains("chaos: rank") => Ok(()),
        Err(msg) => Err(format!("rank {r} panicked: {msg}")),
        Ok(Ok(_)) if injected_panic => Err(format!("rank {r} should have panicked")),
        // Finished before the fault reached it, or no fault.
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => {
            let ok = match prog.fault {
                Fault::None => false,
                // The panicking rank's peers learn at once; those that
                // wait on a peer which then returns learn of that one.
                // MPI has no such notice: the panicking process aborts the
                // job, and a peer whose deadline passes before the abort
                // reaches it reports the timeout.
                Fault::Panic { .. } => {
                    matches!(e, Error::Comm(CommError::PeerFailure { .. }))
                        || (mpi && matches!(e, Error::Comm(CommError::Timeout { .. })))
                }
                Fault::Late { rank, .. } if rank == r => true,
                Fault::Late { .. } => {
                    matches!(e, Error::Comm(CommError::Timeout { .. })) || peer_failed(e, false)
                }
                Fault::Skip { .. } | Fault::WrongOp { .. } | Fault::WrongSize { .. } => {
                    !peer_failed(e, true)
                }
            };
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "rank {r}: unexpected error for a {} fault: {e}",
                    prog.fault.kind()
                ))
            }
        }
    }
}

/// Whether every rank's outcome is one the fault allows, and the run as a
/// whole is consistent.
fn judge(prog: &Program, outcomes: &[Result<Outcome, String>]) -> Result<(), String> {
    for (r, o) in outcomes.iter().enumerate() {
        judge_rank(prog, r, o, false)?;
    }
    match prog.fault {
        Fault::None => {
            let losses: Vec<Option<f64>> = outcomes
                .iter()
                .map(|o| {
                    o.as_ref()
                        .ok()
                        .and_then(|x| x.as_ref().ok())
                        .copied()
                        .flatten()
                })
                .collect();
            if losses.iter().any(|l| l != &losses[0]) {
                return Err(format!("replicated losses differ: {losses:?}"));
            }
        }
        Fault::WrongOp { rank, step } | Fault::WrongSize { rank, step }
            if group_size(prog, prog.steps[step]) > 1 =>
        {
            // The faulty rank itself must be told (alone in its group, it
            // has no one to disagree with).
            if matches!(outcomes[rank], Ok(Ok(_))) {
                return Err(format!(
                    "rank {rank}'s {} went unnoticed",
                    prog.fault.kind()
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Run one program on threads; the outcomes and how long the run took.
fn run_local(prog: &Program, timeout: Duration) -> (Vec<Result<Outcome, String>>, Duration) {
    let start = Instant::now();
    let results = LocalWorld::new(prog.polar * prog.azimuth)
        .timeout(timeout)
        .run_each(|c| Ok::<_, ()>(run_rank(c, prog, timeout)));
    let outcomes = results
        .into_iter()
        .map(|r| match r {
            Ok(o) => Ok(o),
            Err(RankError::Panicked(m)) => Err(m),
            Err(RankError::Failed(())) => unreachable!("run_rank's errors are values"),
        })
        .collect();
    (outcomes, start.elapsed())
}

struct Args {
    programs: u64,
    seed: u64,
    timeout: Duration,
    quiet: bool,
    mpi: bool,
}

fn args() -> Args {
    let mut a = Args {
        programs: 200,
        seed: 1,
        timeout: Duration::from_millis(400),
        quiet: false,
        mpi: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("a number")
        };
        match k.as_str() {
            "--programs" => a.programs = val(),
            "--seed" => a.seed = val(),
            "--timeout-ms" => a.timeout = Duration::from_millis(val()),
            "--quiet" => a.quiet = true,
            "--mpi" => a.mpi = true,
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn main() -> std::process::ExitCode {
    // Injected panics are expected; keep their messages out of the way.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.to_string();
        if !msg.contains("chaos: rank") && !msg.contains("ruda: the backward pass") {
            hook(info);
        }
    }));
    let a = args();
    if a.mpi {
        return mpi_main(&a);
    }
    let mut by_kind: std::collections::BTreeMap<&str, (u64, Duration)> = Default::default();
    let mut worst = (Duration::ZERO, 0u64);
    // Programs with an overlapped reduction, and those with the fault at it.
    let mut overlaps = (0u64, 0u64);
    for i in 0..a.programs {
        let prog = generate(a.seed.wrapping_add(i));
        if let Some(at) = prog.steps.iter().position(|&s| s == Step::Overlap) {
            overlaps.0 += 1;
            overlaps.1 += u64::from(prog.fault.at_step() == Some(at));
        }
        let (tx, rx) = mpsc::channel();
        let (p2, t) = (prog.clone(), a.timeout);
        std::thread::spawn(move || {
            let _ = tx.send(run_local(&p2, t));
        });
        // A generous watchdog: every wait has the short deadline `t`.
        let limit = a.timeout * (2 * prog.steps.len() as u32 + 10) + Duration::from_secs(5);
        let Ok((outcomes, took)) = rx.recv_timeout(limit) else {
            eprintln!("HANG: {prog} did not end within {limit:?}");
            return std::process::ExitCode::FAILURE;
        };
        if let Err(why) = judge(&prog, &outcomes) {
            eprintln!("FAILED: {prog}: {why}");
            return std::process::ExitCode::FAILURE;
        }
        let e = by_kind.entry(prog.fault.kind()).or_default();
        e.0 += 1;
        e.1 = e.1.max(took);
        if took > worst.0 {
            worst = (took, prog.seed);
        }
        if !a.quiet && (i + 1) % 100 == 0 {
            eprintln!("{} programs", i + 1);
        }
    }
    println!(
        "chaos: {} programs, 0 hangs, 0 violations; worst time to end {:.3} s (seed {}), deadline {:?}",
        a.programs,
        worst.0.as_secs_f64(),
        worst.1,
        a.timeout
    );
    for (k, (count, w)) in by_kind {
        println!(
            "  fault {k:<10} {count:>6} programs, slowest {:.3} s",
            w.as_secs_f64()
        );
    }
    println!(
        "  overlapped reductions in {} programs, the fault at it in {}",
        overlaps.0, overlaps.1
    );
    std::process::ExitCode::SUCCESS
}

#[cfg(not(feature = "mpi"))]
fn mpi_main(_: &Args) -> std::process::ExitCode {
    eprintln!("ruda-chaos was built without the `mpi` feature");
    std::process::ExitCode::FAILURE
}

/// One program per MPI job: every rank prints its outcome as one line.
#[cfg(feature = "mpi")]
fn mpi_main(a: &Args) -> std::process::ExitCode {
    let mpi = ruda_comm::MpiWorld::builder()
        .timeout(a.timeout)
        .abort_on_panic(true)
        .init()
        .expect("MPI starts");
    let world = mpi.world().expect("the world communicator");
    let (me, n) = (world.rank(), world.size());
    let mut prog = generate(a.seed);
    // Fit the program's grid to the job's size.
    (prog.polar, prog.azimuth) = if n % 2 == 0 { (n / 2, 2) } else { (n, 1) };
    if let Fault::Panic { rank, .. }
    | Fault::Skip { rank, .. }
    | Fault::WrongSize { rank, .. }
    | Fault::WrongOp { rank, .. }
    | Fault::Late { rank, .. } = &mut prog.fault
    {
        *rank %= n;
    }
    let out = run_rank(world, &prog, a.timeout);
    let verdict = judge_rank(&prog, me, &Ok(out.clone()), true);
    match (&out, verdict) {
        (_, Err(why)) => println!("rank {me}: VIOLATION {why} ({prog})"),
        (Ok(_), Ok(())) => println!("rank {me}: ok ({})", prog.fault.kind()),
        (Err(e), Ok(())) => println!("rank {me}: error ({}): {e}", prog.fault.kind()),
    }
    std::process::ExitCode::SUCCESS
}
