//! `ruda`: the command-line face of ruda.
//!
//! `ruda demo` runs the stack end to end and prints what it verified.

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use ruda_comm::{Communicator, LocalWorld, ReduceOp, conformance};

/// Differentiable collective communication for Rust tensors.
#[derive(Parser, Debug)]
#[command(name = "ruda", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run collectives on in-process ranks and verify every result against a
    /// serial reference.
    Demo {
        /// Largest world size to run (1 to 8 ranks as threads).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=8))]
        max_ranks: u16,
    },
}

fn demo(max_ranks: usize) -> Result<(), String> {
    for n in 1..=max_ranks {
        let t = Instant::now();
        let sums = LocalWorld::new(n)
            .run(|c| {
                conformance::check_all_dtypes(&c, 37, n as u64)?;
                conformance::check_split(&c, n as u64)?;
                let mut v = vec![c.rank() as f64 + 1.0; 1 << 16];
                c.all_reduce(&mut v, ReduceOp::Sum)?;
                Ok::<_, conformance::ConformanceError>(v[0])
            })
            .map_err(|e| format!("{n} ranks: {e}"))?;
        let expected = (n * (n + 1) / 2) as f64;
        if sums.iter().any(|&s| s != expected) {
            return Err(format!(
                "{n} ranks: all-reduce gave {sums:?}, expected {expected}"
            ));
        }
        println!(
            "{n} rank(s): every collective × 8 element types and sub-groups match the serial reference ({:.0} ms)",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { max_ranks } => demo(max_ranks as usize),
    };
    match result {
        Ok(()) => {
            println!("verdict: OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("verdict: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
