//! Row exchanges: `all_to_all_v` and the neighbour exchange of halos are
//! one operation, [`AllToAllV`]: rank `r` sends a block of rows (possibly
//! none) to each peer, and states what it expects from each. The agreement
//! carries every rank's send plan and expectations, so every rank learns
//! its receive counts and checks every pair, with no second exchange. The
//! adjoint sends every gradient row back where it came from.

use alloc::vec::Vec;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType};

use super::{LinearOp, Role};
use crate::agreement::{self, Facts, Problem};
use crate::error::{CountProblem, Error, ShapeProblem, TensorOp};
use crate::group::Group;

/// What a rank expects to receive from one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expect {
    /// Whatever the peer sends (`all_to_all_v`).
    Any,
    /// Exactly this many rows (the reverse exchange of a backward pass).
    Rows(usize),
    /// A block of any number of rows (a neighbour it receives from).
    Block,
    /// No block at all.
    Nothing,
}

impl Expect {
    fn encode(self) -> i64 {
        match self {
            Expect::Any => 0,
            Expect::Rows(k) => k as i64 + 1,
            Expect::Block => -1,
            Expect::Nothing => -2,
        }
    }
}

/// Send block `p` of the leading rows (blocks in rank order; `None`: no
/// block) to each rank `p`; receive every block sent here, in source
/// order. Trailing axes must agree across the group.
#[derive(Clone, Debug)]
pub struct AllToAllV {
    role: Role,
    send: Vec<Option<usize>>,
    expect: Vec<Expect>,
    /// The contract's form: the trailing axes must be nonzero.
    contract: bool,
    /// A problem the caller found in its own arguments, reported on every rank.
    problem: Option<Problem>,
}

impl AllToAllV {
    /// `all_to_all_v` with `send_counts[p]` rows to rank `p`.
    pub fn new(op: TensorOp, send_counts: &[usize]) -> Self {
        AllToAllV {
            role: Role::forward(op),
            send: send_counts.iter().map(|&c| Some(c)).collect(),
            expect: alloc::vec![Expect::Any; send_counts.len()],
            contract: matches!(op, TensorOp::AllToAllVFloat | TensorOp::AllToAllVInt),
            problem: None,
        }
    }

    /// A neighbour exchange: `send[p]` rows (or no block) to rank `p`, and
    /// from each peer the block or nothing `expect` says.
    pub fn neighbours(op: TensorOp, send: Vec<Option<usize>>, expect: Vec<Expect>) -> Self {
        AllToAllV {
            role: Role::forward(op),
            send,
            expect,
            contract: false,
            problem: None,
        }
    }

    /// The same exchange, with a problem this rank found in its own
    /// arguments, to be reported on every rank.
    pub(crate) fn with_problem(mut self, problem: Option<Problem>) -> Self {
        self.problem = problem;
        self
    }
}

/// Rows received from each rank.
#[derive(Clone, Debug)]
pub struct ExchangePlan {
    /// Rows each rank sends this rank.
    pub recv: Vec<usize>,
    /// Rows this rank sends each rank.
    pub send: Vec<usize>,
}

/// Agree on an exchange: every rank's send plan and expectations.
#[allow(clippy::too_many_arguments)]
pub(crate) fn agree_exchange<G: Group>(
    g: &G,
    role: Role,
    send: &[Option<usize>],
    expect: &[Expect],
    shape: &[usize],
    dtype: DType,
    tracked: Option<bool>,
    contract: bool,
    problem: Option<Problem>,
) -> Result<ExchangePlan, Error> {
    let (me, n) = (g.rank(), g.size());
    let rows = shape.first().copied().unwrap_or(0);
    let sum = send
        .iter()
        .try_fold(0usize, |a, c| a.checked_add(c.unwrap_or(0)));
    let problem = if problem.is_some() {
        problem
    } else if shape.is_empty() {
        Some(Problem::Shape(ShapeProblem::NoLeadingAxis))
    } else if contract && shape[1..].contains(&0) {
        Some(Problem::Shape(ShapeProblem::ZeroTrailingAxis))
    } else if !agreement::movable(dtype) {
        Some(Problem::UnsupportedDType)
    } else if send.len() != n || expect.len() != n {
        Some(Problem::Counts(CountProblem::Length {
            got: send.len(),
            ranks: n,
        }))
    } else if sum != Some(rows) {
        Some(Problem::Counts(CountProblem::Sum {
            sum: sum.unwrap_or(usize::MAX),
            rows,
        }))
    } else {
        None
    };
    let mut words = alloc::vec![0i64; 2 * n];
    if problem.is_none() {
        for p in 0..n {
            words[p] = send[p].map_or(0, |c| c as i64 + 1);
            words[n + p] = expect[p].encode();
        }
    }
    let mut f = Facts::new(role.op, dtype, shape);
    f.backward = role.backward;
    f.problem = problem;
    f.free_axis = Some(0);
    f.tracked = tracked;
    f.words = &words;
    let agreed = agreement::agree(g, f, |_, _, _| unreachable!("no parameter"))?;
    // Check every pair in the same order on every rank.
    for dst in 0..n {
        for src in 0..n {
            let sent = agreed.words[src][dst];
            let expected = agreed.words[dst][n + src];
            let problem = match expected {
                0 => None,
                -1 if sent == 0 => Some(CountProblem::Unmatched {
                    source: src,
                    dest: dst,
                    sent: false,
                }),
                -2 if sent != 0 => Some(CountProblem::Unmatched {
                    source: src,
                    dest: dst,
                    sent: true,
                }),
                k if k > 0 && sent != k => Some(CountProblem::Reverse {
                    source: src,
                    expected: (k - 1) as usize,
                    got: (sent - 1).max(0) as usize,
                }),
                _ => None,
            };
            if let Some(problem) = problem {
                // An unexpected or wrong block is the sender's; a missing
                // one, the receiver's that asked for it.
                let offender = match problem {
                    CountProblem::Unmatched { sent: false, .. } => dst,
                    _ => src,
                };
                return Err(Error::Counts {
                    op: role.op,
                    rank: me,
                    offender,
                    problem,
                });
            }
        }
    }
    let rows_of = |w: i64| (w - 1).max(0) as usize;
    Ok(ExchangePlan {
        recv: (0..n).map(|src| rows_of(agreed.words[src][me])).collect(),
        send: (0..n).map(|p| rows_of(agreed.words[me][p])).collect(),
    })
}

impl LinearOp for AllToAllV {
    type Plan = ExchangePlan;
    type Adjoint = AllToAllV;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<ExchangePlan, Error> {
        agree_exchange(
            g,
            self.role,
            &self.send,
            &self.expect,
            shape,
            dtype,
            Some(tracked),
            self.contract,
            self.problem,
        )
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &ExchangePlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        if g.size() == 1 {
            return Ok(x);
        }
        g.exchange_rows::<B>(self.role.op, x, &plan.send, &plan.recv)
    }

    fn adjoint(&self, plan: &ExchangePlan) -> AllToAllV {
        // Blocks go back to where they came from; each rank expects back
        // exactly the rows it sent.
        let back: Vec<Option<usize>> = plan
            .recv
            .iter()
            .zip(&self.expect)
            .map(|(&r, e)| (r > 0 || *e != Expect::Nothing).then_some(r))
            .collect();
        AllToAllV {
            role: self.role.adjoint(),
            send: back,
            expect: self
                .send
                .iter()
                .map(|s| match s {
                    Some(c) => Expect::Rows(*c),
                    None => Expect::Nothing,
                })
                .collect(),
            contract: false,
            problem: None,
        }
    }
}
