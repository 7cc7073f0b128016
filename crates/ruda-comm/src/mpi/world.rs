//! Starting and ending MPI for ruda: initialisation, the panic hook that
//! takes the job down, and finalisation after the last communicator.

use std::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex, Weak};

use mpi::ffi;

use super::communicator::MpiCommunicator;
use super::raw;
use crate::{CommError, OpKind};

/// Ends MPI when the last communicator that holds it is dropped.
#[derive(Debug)]
pub(crate) struct Session {
    /// `MPI_IN_PLACE` is Open MPI's `(void *) 1`; other libraries get a copy.
    pub in_place: bool,
    /// `RUDA_DEBUG=1`: exchange fingerprints before every collective.
    pub debug: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        let mut done: c_int = 0;
        // SAFETY: plain MPI state queries and finalisation on the owning process.
        unsafe {
            ffi::MPI_Finalized(&mut done);
            if done == 0 {
                ffi::MPI_Finalize();
            }
        }
    }
}

static SESSION: Mutex<Weak<Session>> = Mutex::new(Weak::new());

/// The MPI transport's entry point.
///
/// # Example
/// ```no_run
/// use ruda_comm::{Communicator, MpiWorld, ReduceOp};
/// // Run with: mpirun -n 4 target/release/my_program
/// let world = MpiWorld::init().expect("MPI starts");
/// let mut x = [world.rank() as f32];
/// world.all_reduce(&mut x, ReduceOp::Sum).unwrap();
/// ```
#[derive(Debug)]
pub struct MpiWorld;

impl MpiWorld {
    /// Initialise MPI (once per process; later calls return a new handle on
    /// the same world) and return the world communicator. Also installs a
    /// panic hook that aborts the whole MPI job after printing the panic, so
    /// that no rank is left blocked waiting for one that died.
    ///
    /// MPI is finalised when the last communicator is dropped; it cannot be
    /// initialised again in the same process after that.
    ///
    /// # Errors
    /// [`CommError::Transport`] when MPI fails to start or was already
    /// finalised.
    pub fn init() -> Result<MpiCommunicator, CommError> {
        let mut guard = SESSION.lock().unwrap_or_else(|e| e.into_inner());
        let session = match guard.upgrade() {
            Some(s) => s,
            None => {
                let s = Arc::new(start()?);
                *guard = Arc::downgrade(&s);
                s
            }
        };
        drop(guard);
        // SAFETY: reading MPI's null communicator handle.
        let mut comm = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: MPI is initialised; duplicate the world so the communicator owns its handle.
        let rc = unsafe { ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut comm) };
        raw::check(OpKind::Init, 0, rc)?;
        Ok(MpiCommunicator::new(comm, session))
    }
}

fn start() -> Result<Session, CommError> {
    let (mut initialized, mut finalized): (c_int, c_int) = (0, 0);
    // SAFETY: MPI state queries are allowed before MPI_Init.
    unsafe {
        ffi::MPI_Initialized(&mut initialized);
        ffi::MPI_Finalized(&mut finalized);
    }
    if finalized != 0 {
        return Err(CommError::Transport {
            op: OpKind::Init,
            rank: 0,
            message: "MPI was already finalized in this process".into(),
            context: ErrorContext::none(),
        });
    }
    if initialized == 0 {
        let mut provided: c_int = 0;
        // SAFETY: first initialisation of this process; no arguments passed.
        let rc = unsafe {
            ffi::MPI_Init_thread(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                ffi::RSMPI_THREAD_SERIALIZED,
                &mut provided,
            )
        };
        raw::check(OpKind::Init, 0, rc)?;
    }
    // SAFETY: MPI is initialised; errors on the world (and communicators
    // derived from it) return codes instead of aborting.
    unsafe { ffi::MPI_Comm_set_errhandler(ffi::RSMPI_COMM_WORLD, ffi::RSMPI_ERRORS_RETURN) };
    install_panic_hook();
    Ok(Session {
        in_place: is_open_mpi(),
        debug: std::env::var("RUDA_DEBUG").is_ok_and(|v| v == "1"),
    })
}

fn is_open_mpi() -> bool {
    let mut buf = vec![0 as c_char; 8192];
    let mut len: c_int = 0;
    // SAFETY: the buffer exceeds MPI_MAX_LIBRARY_VERSION_STRING.
    let rc = unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
    rc == 0
        && buf[..len.max(0) as usize]
            .iter()
            .map(|&c| c as u8 as char)
            .collect::<String>()
            .contains("Open MPI")
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            eprintln!("ruda: a rank panicked; aborting the MPI job so that no rank waits for it");
            // SAFETY: abort the whole job; never returns in practice.
            unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 70) };
        }));
    });
}
