//! `RUDA_TIMEOUT_SECS` sets the default deadline (its own process, since it
//! changes the environment).

use std::time::Duration;

use ruda_comm::{DEFAULT_TIMEOUT, LocalWorld, TIMEOUT_ENV};

#[test]
fn env_sets_the_default_and_the_builder_overrides_it() {
    // SAFETY: this test binary has a single test, so no other thread reads
    // the environment concurrently.
    unsafe { std::env::remove_var(TIMEOUT_ENV) };
    assert_eq!(LocalWorld::new(2).effective_timeout(), DEFAULT_TIMEOUT);
    // SAFETY: as above.
    unsafe { std::env::set_var(TIMEOUT_ENV, "2.5") };
    assert_eq!(
        LocalWorld::new(2).effective_timeout(),
        Duration::from_millis(2500)
    );
    assert_eq!(
        LocalWorld::new(2)
            .timeout(Duration::from_secs(1))
            .effective_timeout(),
        Duration::from_secs(1)
    );
    // SAFETY: as above.
    unsafe { std::env::set_var(TIMEOUT_ENV, "soon") };
    assert_eq!(LocalWorld::new(2).effective_timeout(), DEFAULT_TIMEOUT);
}
