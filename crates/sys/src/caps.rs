//! Capability sets of the calling thread: capget/capset (version 3, 64-bit sets), the bounding
//! set (`PR_CAPBSET_READ`/`PR_CAPBSET_DROP`) and the ambient set (`PR_CAP_AMBIENT`).
//!
//! Theory of operation: a capability is a bit number (`CAP_CHOWN` = 0 ... `cap_last_cap`). The
//! kernel's v3 ABI splits each 64-bit set into two 32-bit words; [`Sets`] hides that split. Nothing
//! here knows capability names: pier-runtime maps the spec's names to numbers.
//!
//! Privileges: capget and the reads need none; capset may only lower sets unless the caller has
//! CAP_SETPCAP; dropping from the bounding set needs CAP_SETPCAP; raising an ambient capability
//! needs it in both the permitted and the inheritable set.
//! Tests: the unprivileged reads below; the privileged effects in pier-runtime's `priv_process`.
use std::io;

/// `_LINUX_CAPABILITY_VERSION_3` from `<linux/capability.h>`.
const VERSION_3: u32 = 0x2008_0522;

/// The three per-thread capability sets as 64-bit masks (bit n = capability n).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sets {
    /// Capabilities the thread uses for permission checks.
    pub effective: u64,
    /// Limiting superset of effective and inheritable.
    pub permitted: u64,
    /// Capabilities preserved across execve (with file inheritable bits or ambient).
    pub inheritable: u64,
}

#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn split(v: u64) -> (u32, u32) {
    (v as u32, (v >> 32) as u32)
}

fn join(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// Reads the calling thread's capability sets (capget).
pub fn get() -> io::Result<Sets> {
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: header is a valid cap_user_header_t; data points to the two cap_user_data_t
    // structs the v3 ABI writes; both outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Sets {
        effective: join(data[0].effective, data[1].effective),
        permitted: join(data[0].permitted, data[1].permitted),
        inheritable: join(data[0].inheritable, data[1].inheritable),
    })
}

/// Sets the calling thread's capability sets (capset).
pub fn set(sets: &Sets) -> io::Result<()> {
    let (e0, e1) = split(sets.effective);
    let (p0, p1) = split(sets.permitted);
    let (i0, i1) = split(sets.inheritable);
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [
        Data {
            effective: e0,
            permitted: p0,
            inheritable: i0,
        },
        Data {
            effective: e1,
            permitted: p1,
            inheritable: i1,
        },
    ];
    // SAFETY: header and the two data structs are valid for the v3 ABI and outlive the call;
    // the kernel only reads data.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn prctl(option: libc::c_int, arg2: libc::c_ulong, arg3: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: the options used here (CAPBSET_*, CAP_AMBIENT) take integer arguments only and
    // touch no caller memory.
    let rc = unsafe { libc::prctl(option, arg2, arg3, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    crate::check(rc)?;
    Ok(rc)
}

/// True when capability `cap` is in the calling thread's bounding set (`PR_CAPBSET_READ`).
pub fn bounding_has(cap: u32) -> io::Result<bool> {
    prctl(libc::PR_CAPBSET_READ, cap.into(), 0).map(|v| v == 1)
}

/// Removes capability `cap` from the bounding set (`PR_CAPBSET_DROP`).
pub fn bounding_drop(cap: u32) -> io::Result<()> {
    prctl(libc::PR_CAPBSET_DROP, cap.into(), 0).map(drop)
}

/// Empties the ambient set (`PR_CAP_AMBIENT_CLEAR_ALL`).
pub fn ambient_clear() -> io::Result<()> {
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
    )
    .map(drop)
}

/// Adds capability `cap` to the ambient set (`PR_CAP_AMBIENT_RAISE`).
pub fn ambient_raise(cap: u32) -> io::Result<()> {
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
        cap.into(),
    )
    .map(drop)
}

/// The highest capability number the running kernel knows (`/proc/sys/kernel/cap_last_cap`).
pub fn last_cap() -> io::Result<u32> {
    let text = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, text.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_join_roundtrip() {
        let v = 0x0000_01ff_8000_0001u64;
        let (lo, hi) = split(v);
        assert_eq!(join(lo, hi), v);
    }

    #[test]
    fn get_matches_proc_status() {
        let sets = get().unwrap();
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .unwrap()
            .trim();
        assert_eq!(u64::from_str_radix(eff, 16).unwrap(), sets.effective);
    }

    #[test]
    fn bounding_read_matches_proc_status() {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let bnd = status
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .unwrap()
            .trim();
        let mask = u64::from_str_radix(bnd, 16).unwrap();
        for cap in 0..=last_cap().unwrap() {
            assert_eq!(
                bounding_has(cap).unwrap(),
                mask & (1 << cap) != 0,
                "cap {cap}"
            );
        }
    }
}
