//! The chaos suite on the local transport: randomized programs of
//! collectives and differentiable primitives on random grids, each with an
//! injected fault (a panic before or after a step or inside a backward
//! pass, a skipped call, wrong sizes, another operation, a rank that
//! arrives after the deadline). Every run must end within its deadline
//! with the documented error on every live rank; see `src/bin/ruda-chaos.rs`.
//!
//! A short run by default; `RUDA_CHAOS=1` (set by CI) runs the full suite,
//! and `RUDA_CHAOS_PROGRAMS=N` any number.

use std::process::Command;

#[test]
fn randomized_faulty_programs_end_with_the_documented_errors() {
    let full = std::env::var("RUDA_CHAOS").as_deref() == Ok("1");
    let programs: u64 = std::env::var("RUDA_CHAOS_PROGRAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 600 } else { 40 });
    let out = Command::new(env!("CARGO_BIN_EXE_ruda-chaos"))
        .args([
            "--programs",
            &programs.to_string(),
            "--seed",
            "20261130",
            "--quiet",
        ])
        .output()
        .expect("run ruda-chaos");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "chaos: {programs} programs, 0 hangs, 0 violations"
        )),
        "{text}"
    );
    // Every kind of fault was injected.
    for kind in ["none", "panic", "skip", "wrong size", "wrong op", "late"] {
        assert!(
            text.contains(&format!("fault {kind:<10}")),
            "no {kind} fault: {text}"
        );
    }
}
