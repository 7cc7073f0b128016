//! Cross-memory attach: one process reads another's memory in one copy
//! (Linux `process_vm_readv`, as Open MPI's shared-memory transport does
//! for large messages). The kernel checks that the reader may trace the
//! target (same user and no `PR_SET_DUMPABLE` off, and Yama's
//! `ptrace_scope` allowing it), and a container's seccomp profile may
//! refuse the call: [`readable`] tells whether it works between two
//! processes before a communicator relies on it.

use std::io;

/// Read `len` bytes at address `remote` of process `pid` into `local`,
/// looping over partial transfers and interruptions.
///
/// # Errors
/// The system's error: `ESRCH` when the process is gone, `EPERM` when
/// this process may not read it, `EFAULT` when a range is not mapped;
/// `UnexpectedEof` when the kernel moved nothing.
///
/// # Safety
/// `local` is valid for `len` writes and nothing else reads or writes it
/// during the call. (`remote` needs nothing from this process: the kernel
/// checks the target's mapping.)
#[cfg(target_os = "linux")]
pub(crate) unsafe fn read(
    pid: libc::pid_t,
    remote: usize,
    local: *mut u8,
    len: usize,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let at = remote
            .checked_add(done)
            .ok_or_else(|| io::Error::other(format!("address {remote:#x} + {done} overflows")))?;
        let rest = len - done;
        let into = libc::iovec {
            // SAFETY: `done < len`, inside `local` (caller).
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: rest,
        };
        let from = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: rest,
        };
        // SAFETY: one iovec each way; the kernel writes only `into`'s range (valid, ours: caller).
        let got = unsafe { libc::process_vm_readv(pid, &into, 1, &from, 1, 0) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("process {pid} gave no bytes at {at:#x}"),
            ));
        }
        // `got <= rest`: the kernel moves at most what was asked.
        done += usize::try_from(got).unwrap_or(rest).min(rest);
    }
    Ok(())
}

/// Elsewhere than Linux there is no cross-memory attach.
///
/// # Errors
/// Always `Unsupported`.
///
/// # Safety
/// None needed; the signature matches Linux's.
#[cfg(not(target_os = "linux"))]
pub(crate) unsafe fn read(
    _pid: libc::pid_t,
    _remote: usize,
    _local: *mut u8,
    _len: usize,
) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Whether this process can read the `u64` at `remote` in process `pid`
/// and finds `expected` there: the probe a communicator runs against each
/// peer before its collectives read peers' buffers directly.
pub(crate) fn readable(pid: libc::pid_t, remote: usize, expected: u64) -> bool {
    let mut got = [0u8; 8];
    // SAFETY: `got` is ours, 8 bytes.
    let ok = unsafe { read(pid, remote, got.as_mut_ptr(), got.len()) }.is_ok();
    ok && u64::from_ne_bytes(got) == expected
}

/// Words of a CPU mask ([`cpu_mask`]): 1024 CPUs, glibc's `cpu_set_t`.
pub(crate) const MASK_WORDS: usize = 16;

/// The CPUs this thread may run on (its affinity mask; under `mpirun
/// --bind-to core`, its core), one bit per CPU; empty if unknown.
#[cfg(target_os = "linux")]
pub(crate) fn cpu_mask() -> [u64; MASK_WORDS] {
    // SAFETY: a plain bit set, valid zeroed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is ours and as large as the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    let mut mask = [0u64; MASK_WORDS];
    if rc == 0 {
        for (cpu, word) in (0..MASK_WORDS * 64).map(|c| (c, c / 64)) {
            // SAFETY: `cpu` is below `CPU_SETSIZE` (1024 = 16 × 64).
            if unsafe { libc::CPU_ISSET(cpu, &set) } {
                mask[word] |= 1 << (cpu % 64);
            }
        }
    }
    mask
}

/// Elsewhere than Linux: unknown (no CPUs).
#[cfg(not(target_os = "linux"))]
pub(crate) fn cpu_mask() -> [u64; MASK_WORDS] {
    [0; MASK_WORDS]
}

/// This process's id.
pub(crate) fn pid() -> libc::pid_t {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_its_own_memory_and_refuses_an_unmapped_address() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        // SAFETY: `dst` is ours, `src.len()` bytes.
        unsafe { read(pid(), src.as_ptr() as usize, dst.as_mut_ptr(), src.len()) }
            .expect("a process may read itself");
        assert_eq!(dst, src);
        let token = Box::new(0x5eed_u64);
        assert!(readable(pid(), &*token as *const u64 as usize, 0x5eed));
        assert!(!readable(pid(), &*token as *const u64 as usize, 0x5eee));
        // The first page is never mapped.
        let mut b = [0u8; 8];
        // SAFETY: `b` is ours, 8 bytes.
        let e = unsafe { read(pid(), 8, b.as_mut_ptr(), 8) }.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        // SAFETY: as above.
        unsafe { read(pid(), 8, b.as_mut_ptr(), 0) }.expect("nothing to read");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_cpu_mask_counts_the_cpus_this_thread_may_use() {
        let n: u32 = cpu_mask().iter().map(|w| w.count_ones()).sum();
        // The standard library's count also honours a cgroup quota.
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(
            n as usize >= usable.max(1),
            "{n} CPUs in the mask, {usable} usable"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_process_that_is_gone_is_esrch() {
        let mut child = std::process::Command::new("true").spawn().expect("spawns");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        child.wait().expect("ends");
        let mut b = [0u8; 8];
        // SAFETY: `b` is ours, 8 bytes.
        let e = unsafe { read(pid, 4096, b.as_mut_ptr(), 8) }.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "{e}");
    }
}
