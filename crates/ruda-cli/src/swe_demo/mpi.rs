//! The shallow-water job under `mpirun` (feature `mpi`): one rank per
//! process. Every process makes the same batches (the data are seeded by
//! step), trains its patch of its replica, and joins one small reduction
//! per step that sums the replicas' losses, spreads any rank's failure (so
//! that all stop together, none waits for a collective that will not
//! come) and checks that every rank holds the same parameters to the bit;
//! rank 0 also trains the serial model in a thread, compares, writes the
//! report, the checkpoint record and the pictures.

use std::io::Write;
use std::sync::Mutex;
use std::sync::mpsc::channel;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use ruda_comm::{Communicator, LocalWorld, MpiCommunicator, ReduceOp, WorldError};
use ruda_sphere::shallow_water::SerialDomain;
use ruda_tensor::ddp::{GradientReduction, hybrid_step};
use ruda_tensor::{Group, HostCollective, HybridGrid};

use super::trainer::{Batch, Trainer};
use super::{
    Finish, MODEL_SEED, Report, Setup, SweDemoConfig, SweVerdict, TOLERANCE, conclude, rank_error,
    record_step, rel_diff, train_loop,
};
use crate::demo::DemoError;

/// Run the job with one rank per MPI process (every process of `world`
/// calls it with the same `cfg`); rank 0 writes the report to `out` and
/// the pictures, and every rank returns the same verdict (on ranks other
/// than 0 without the rollout errors: `model` and `persistence` empty).
///
/// # Errors
/// [`DemoError::Processes`] when `replicas × polar × azimuth` is not the
/// number of processes; [`DemoError::Grid`] when the grid does not fit the
/// model; the errors of
/// [`super::run`]; every rank returns an error when any rank fails.
pub fn run_mpi(
    cfg: &SweDemoConfig,
    world: MpiCommunicator,
    out: &mut impl Write,
) -> Result<SweVerdict, DemoError> {
    let (me, n) = (world.rank(), world.size());
    let lead = me == 0;
    let needed = cfg
        .replicas
        .checked_mul(cfg.polar)
        .and_then(|x| x.checked_mul(cfg.azimuth));
    if needed != Some(n) {
        return Err(DemoError::Processes {
            replicas: cfg.replicas,
            polar: cfg.polar,
            azimuth: cfg.azimuth,
            ranks: n,
        });
    }
    // Rank 0 alone writes the header and makes the folders: every rank
    // learns whether any setup failed before the first other collective.
    let setup = Setup::new(cfg, "MPI processes", lead, out);
    let mut failures = [f64::from(u8::from(setup.is_err()))];
    let agreed = world.all_reduce(&mut failures, ReduceOp::Sum);
    let setup = setup?;
    let name = setup.grid_name.clone();
    let fail = |e: &dyn std::fmt::Display| rank_error(&name, me, e);
    agreed.map_err(|e| fail(&e))?;
    if failures[0] > 0.0 {
        return Err(fail(
            &"another rank could not set up the run (its own error names why)",
        ));
    }
    // A communicator of its own for the per-step agreement.
    let check = world
        .split(Some(0), 0)
        .map_err(|e| fail(&e))?
        .expect("every rank has a colour");
    let grid =
        HybridGrid::new(world, cfg.replicas, cfg.polar, cfg.azimuth).map_err(|e| fail(&e))?;
    let replica = grid.replica_rank();
    let samples = setup.shares[replica].len();
    let domain_lead = grid.domain().world().rank() == 0;
    let model_cfg = cfg.model();
    let mut trainer =
        Trainer::new(&model_cfg, grid.domain(), MODEL_SEED, cfg.lr).map_err(|e| fail(&e))?;
    if cfg.resume {
        trainer
            .load(grid.world(), &setup.resume_dir().join("distributed"))
            .map_err(|e| fail(&e))?;
    }
    let bar = if lead {
        let bar = ProgressBar::new((cfg.steps - setup.start) as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} training [{bar:30}] {pos}/{len} steps {elapsed}",
            )
            .expect("valid template"),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let started = Instant::now();
    let (serial_tx, serial_rx) = channel::<Batch>();
    let (serial_rep_tx, serial_rep_rx) = channel::<Report>();
    let serial_rx = Mutex::new(Some(serial_rx));
    let (worst, losses, serial) = std::thread::scope(|s| {
        // Rank 0 trains the serial model alongside, on the whole batches.
        let serial = lead.then(|| {
            let (setup, serial_rx, serial_rep_tx) = (&setup, &serial_rx, serial_rep_tx);
            s.spawn(move || {
                LocalWorld::new(1).run(|comm| {
                    let world = HostCollective::new(comm);
                    let rx = serial_rx
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take()
                        .expect("the serial run takes its receiver once");
                    let mut t = Trainer::new(&cfg.model(), &SerialDomain, MODEL_SEED, cfg.lr)?;
                    if cfg.resume {
                        t.load(&world, &setup.resume_dir().join("serial"))?;
                    }
                    let mut reduce =
                        |o: &mut burn_optim::ModuleOptimizer, lr, m, g| Ok(o.step(lr, m, g));
                    let mut save =
                        |t: &Trainer, dir: &std::path::Path| t.save(&world, &dir.join("serial"));
                    let tx = |r: Report| serial_rep_tx.send(r).is_ok();
                    let (v, g) = (&setup.validation, &setup.galewsky);
                    train_loop(&mut t, &rx, Some(&tx), &mut reduce, &mut save, v, g)
                })
            })
        });
        let mut worst = setup.resumed.as_ref().map_or(0.0, |g| g.worst);
        let mut losses = setup
            .resumed
            .as_ref()
            .map_or_else(Vec::new, |g| g.losses.clone());
        let mut reduce = |o: &mut burn_optim::ModuleOptimizer, lr, m, g| {
            let how = GradientReduction::WeightedMean { samples };
            Ok(hybrid_step(&grid, o, lr, m, g, how)?)
        };
        let mut failed: Option<DemoError> = None;
        for i in setup.start..cfg.steps {
            // This rank's step, and on rank 0 the serial one.
            // Whether the serial run was handed a batch (and so owes a report).
            let mut handed = false;
            let step = setup.batch(cfg, i).and_then(|batch| {
                // A failed send means the serial run ended: the next report
                // (or its absence) says why.
                handed = lead && serial_tx.send(batch.clone()).is_ok();
                let report = trainer.step(&setup.share(&batch, replica), &mut reduce)?;
                if let Some(dir) = &batch.save {
                    trainer.save(grid.world(), &dir.join("distributed"))?;
                }
                Ok((report, batch.save.is_some()))
            });
            let serial = if !lead {
                None
            } else if handed || step.is_ok() {
                Some(match serial_rep_rx.recv() {
                    Ok(Ok(r)) => Ok(r),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err("the serial run ended early".to_owned()),
                })
            } else {
                // No batch was made: nothing to wait for.
                Some(Err("no batch for this step".to_owned()))
            };
            // Every rank learns whether any failed, and the global loss.
            let mine_failed = step.is_err() || matches!(serial, Some(Err(_)));
            let loss_part = match &step {
                Ok((r, _)) if domain_lead => r.loss * samples as f64,
                _ => 0.0,
            };
            let mut words = [loss_part, f64::from(u8::from(mine_failed))];
            if let Err(e) = check.all_reduce(&mut words, ReduceOp::Sum) {
                failed = Some(fail(&e));
                break;
            }
            if words[1] > 0.0 {
                failed = Some(match (step, serial) {
                    (Err(e), _) => fail(&e),
                    (_, Some(Err(e))) => rank_error("1x1 (serial)", 0, e),
                    _ => fail(&"another rank failed (its own error names it)"),
                });
                break;
            }
            let (report, saved) = step.expect("no rank failed");
            // Every rank holds the same parameters, to the bit.
            let (mut hi, mut lo) = (report.params.clone(), report.params.clone());
            let agreed = check
                .all_reduce(&mut hi, ReduceOp::Max)
                .and_then(|()| check.all_reduce(&mut lo, ReduceOp::Min));
            if let Err(e) = agreed {
                failed = Some(fail(&e));
                break;
            }
            if !hi.iter().zip(&lo).all(|(a, b)| a.to_bits() == b.to_bits()) {
                failed = Some(fail(&format!(
                    "the ranks' parameters differ after step {i}"
                )));
                break;
            }
            // Rank 0 records the step and tells every rank whether to go on.
            let mut go_on = [1.0f64];
            if let Some(Ok(sr)) = &serial {
                let loss = words[0] / cfg.batch as f64;
                let param_diff = rel_diff(&report.params, &sr.params);
                let recorded = record_step(
                    cfg,
                    &setup,
                    i,
                    (loss, sr),
                    param_diff,
                    saved,
                    &mut worst,
                    &mut losses,
                    out,
                );
                if let Err(e) = recorded {
                    failed = Some(e);
                    go_on[0] = 0.0;
                }
                bar.inc(1);
            }
            if let Err(e) = check.broadcast(&mut go_on, 0) {
                failed = failed.or(Some(fail(&e)));
            }
            if go_on[0] == 0.0 {
                failed = failed.or(Some(fail(&"rank 0 could not record the step")));
            }
            if failed.is_some() {
                break;
            }
        }
        drop(serial_tx);
        let serial = serial.map(|h| h.join());
        if let Some(e) = failed {
            // Every rank stopped at this step (the failure was spread).
            return Err(e);
        }
        let serial: Result<Option<Finish>, DemoError> = match serial {
            None => Ok(None),
            Some(Err(_)) => Err(rank_error("1x1 (serial)", 0, "panicked")),
            Some(Ok(Ok(mut f))) => Ok(Some(f.remove(0))),
            Some(Ok(Err(WorldError::Rank { error, .. }))) => {
                Err(rank_error("1x1 (serial)", 0, error))
            }
            Some(Ok(Err(WorldError::Empty))) => Err(rank_error("1x1 (serial)", 0, "no ranks")),
        };
        Ok((worst, losses, serial))
    })?;
    bar.finish_and_clear();
    // Rank 0's serial run may have failed after its last step: every rank
    // learns it before the collectives below.
    let mut failures = [f64::from(u8::from(serial.is_err()))];
    check
        .all_reduce(&mut failures, ReduceOp::Sum)
        .map_err(|e| fail(&e))?;
    let serial = serial?;
    if failures[0] > 0.0 {
        return Err(fail(&"rank 0's serial run failed (its error names why)"));
    }

    // Validation and rollout on every rank (collective), compared with the
    // serial run's, which rank 0 sends to all.
    let validation = trainer.loss(&setup.validation).map_err(|e| fail(&e))?;
    let (rollout, last) = trainer.rollout(&setup.galewsky).map_err(|e| fail(&e))?;
    let (nlat, nlon) = (cfg.nlat, cfg.nlon);
    let field = 3 * nlat * nlon;
    let mut shared = vec![0.0f64; 1 + rollout.len() + field];
    if let Some(f) = &serial {
        shared[0] = f.validation;
        shared[1..1 + f.rollout.len()].copy_from_slice(&f.rollout);
        shared[1 + f.rollout.len()..].copy_from_slice(&f.last);
    }
    check.broadcast(&mut shared, 0).map_err(|e| fail(&e))?;
    let (s_validation, s_rollout, s_last) = (
        shared[0],
        &shared[1..1 + rollout.len()],
        &shared[1 + rollout.len()..],
    );
    let (rows, cols) = trainer.patch_ranges();
    let mut s_patch = Vec::with_capacity(last.len());
    for f in 0..3 {
        for r in rows.clone() {
            let at = (f * nlat + r) * nlon;
            s_patch.extend_from_slice(&s_last[at + cols.start..at + cols.end]);
        }
    }
    let mut eval = [rel_diff(&rollout, s_rollout)
        .max(rel_diff(&[validation], &[s_validation]))
        .max(rel_diff(&last, &s_patch))];
    check
        .all_reduce(&mut eval, ReduceOp::Max)
        .map_err(|e| fail(&e))?;
    let worst = worst.max(eval[0]);

    // Rank 0 concludes; every rank returns its verdict (or its failure).
    let concluded = serial
        .as_ref()
        .map(|f| conclude(cfg, &setup, worst, &losses, f, started, out));
    let mut verdict_words = [0.0f64; 2];
    if let Some(Ok(v)) = &concluded {
        verdict_words = [1.0, f64::from(u8::from(v.beats_persistence))];
    }
    check
        .broadcast(&mut verdict_words, 0)
        .map_err(|e| fail(&e))?;
    match concluded {
        Some(result) => result,
        None if verdict_words[0] == 0.0 => Err(fail(&"rank 0 could not conclude the run")),
        None => Ok(SweVerdict {
            worst,
            agree: worst <= TOLERANCE,
            model: Vec::new(),
            persistence: Vec::new(),
            beats_persistence: verdict_words[1] != 0.0,
        }),
    }
}
