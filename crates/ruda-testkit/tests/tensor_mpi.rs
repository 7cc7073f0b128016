//! The tensor contract and a primitive under real `mpirun` on 1 to 4 ranks
//! (feature `mpi`), through the `ruda-tensor-mpi-check` binary. Without
//! `mpirun` the test says so and passes, unless `RUDA_REQUIRE_MPI=1`.
#![cfg(feature = "mpi")]

use std::process::{Command, Stdio};

#[test]
fn tensor_layer_on_one_to_four_mpi_ranks() {
    if Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        assert!(
            std::env::var("RUDA_REQUIRE_MPI").as_deref() != Ok("1"),
            "RUDA_REQUIRE_MPI=1 but mpirun is missing"
        );
        eprintln!("mpirun not found: MPI tests not run");
        return;
    }
    for n in 1..=4 {
        let out = Command::new("timeout")
            .args([
                "-k",
                "10",
                "300",
                "mpirun",
                "--oversubscribe",
                "--allow-run-as-root",
                "--bind-to",
                "none",
                "-n",
                &n.to_string(),
            ])
            .arg(env!("CARGO_BIN_EXE_ruda-tensor-mpi-check"))
            .output()
            .expect("start mpirun");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{n} ranks:\n{text}");
        assert!(
            text.contains(&format!(
                "tensor layer on mpi, {n} ranks: 14 passed, 0 failed"
            )),
            "{text}"
        );
    }
}
