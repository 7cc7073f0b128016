//! Folding the pending updates of Burn's running states into their values
//! before a replica's buffers are read or written.

use burn_core::module::Module;

/// Fold every pending [`RunningState`](burn_core::module::RunningState)
/// update of `module` into the state's value, as the next training
/// forward pass would.
///
/// Burn 0.22.1's `RunningState` keeps each update aside (per thread) and
/// folds it into the value only at the next update or `value_sync`: a
/// visitor reads the value one step behind, and a value written by a mapper
/// is overwritten by the pending update at the next forward pass. The only
/// public way to fold every pending update is `Module::valid`: each
/// `RunningState::valid` folds the state's own pending updates into its
/// own value, then returns a fresh copy. The copy of the module it returns
/// is dropped; besides the fold, `valid` initializes lazy parameters (as
/// any read of them would). A module whose replicas share one
/// `RunningState` across threads (a model cloned into several ranks'
/// threads) has every thread's pending update folded, as Burn's own sync
/// would.
pub(super) fn fold_running_states<M: Module>(module: &M) {
    drop(module.valid());
}
