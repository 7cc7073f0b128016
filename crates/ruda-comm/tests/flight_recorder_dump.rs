//! `RUDA_FLIGHT_RECORDER=path`: a failure writes the error and every rank's
//! recent calls to `path.<world rank>`. (Its own test binary: it sets a
//! process-wide environment variable.)

use std::time::Duration;

use ruda_comm::{CommError, Communicator, FLIGHT_RECORDER_ENV, LocalWorld, ReduceOp};

#[test]
fn a_desync_dumps_every_ranks_history() {
    let dir = std::env::temp_dir().join(format!("ruda-flight-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("dump");
    // SAFETY: this test binary has a single test, so no other thread reads
    // the environment concurrently.
    unsafe { std::env::set_var(FLIGHT_RECORDER_ENV, &prefix) };
    let results = LocalWorld::new(2)
        .timeout(Duration::from_secs(20))
        .run_each(|c| {
            c.all_reduce(&mut [1.0f32; 4], ReduceOp::Sum)?;
            if c.rank() == 0 {
                c.barrier()
            } else {
                c.all_gather(&[1u8], &mut [0u8; 2])
            }
        });
    for r in &results {
        assert!(matches!(
            r,
            Err(ruda_comm::RankError::Failed(CommError::Desync { .. }))
        ));
    }
    for rank in 0..2 {
        let text = std::fs::read_to_string(format!("{}.{rank}", prefix.display())).unwrap();
        assert!(text.starts_with("collective desync"), "{text}");
        assert!(text.contains("rank 0 (world 0), last 2 calls"), "{text}");
        assert!(text.contains("rank 1 (world 1), last 2 calls"), "{text}");
        assert!(
            text.contains("#0 all_reduce<f32>(count=4, op=sum)"),
            "{text}"
        );
        assert!(text.contains("#1 barrier"), "{text}");
        assert!(text.contains("#1 all_gather<u8>"), "{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
