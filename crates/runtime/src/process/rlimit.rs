//! `process.rlimits`: every `RLIMIT_*` of the spec, applied with setrlimit.
//!
//! Theory of operation: limits are set in spec order. A hard limit above the current hard limit
//! needs CAP_SYS_RESOURCE in the owning user namespace and, on some hosts (this one included),
//! is refused even for root; that refusal gets its own error naming the rlimit, the requested
//! and the current hard value, so the user knows what to ask for instead.
//!
//! Privileges: lowering needs none; raising a hard limit needs CAP_SYS_RESOURCE.
//! Tests: the name mapping below; the effect and the refusal in `tests/priv_process.rs`.
use super::ProcessError;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use oci_spec::runtime::{PosixRlimit, PosixRlimitType};

/// The spec's name of `typ` (`RLIMIT_NOFILE`, ...) and the kernel's resource.
pub(super) fn resource(typ: PosixRlimitType) -> (&'static str, Resource) {
    use PosixRlimitType as T;
    match typ {
        T::RlimitCpu => ("RLIMIT_CPU", Resource::RLIMIT_CPU),
        T::RlimitFsize => ("RLIMIT_FSIZE", Resource::RLIMIT_FSIZE),
        T::RlimitData => ("RLIMIT_DATA", Resource::RLIMIT_DATA),
        T::RlimitStack => ("RLIMIT_STACK", Resource::RLIMIT_STACK),
        T::RlimitCore => ("RLIMIT_CORE", Resource::RLIMIT_CORE),
        T::RlimitRss => ("RLIMIT_RSS", Resource::RLIMIT_RSS),
        T::RlimitNproc => ("RLIMIT_NPROC", Resource::RLIMIT_NPROC),
        T::RlimitNofile => ("RLIMIT_NOFILE", Resource::RLIMIT_NOFILE),
        T::RlimitMemlock => ("RLIMIT_MEMLOCK", Resource::RLIMIT_MEMLOCK),
        T::RlimitAs => ("RLIMIT_AS", Resource::RLIMIT_AS),
        T::RlimitLocks => ("RLIMIT_LOCKS", Resource::RLIMIT_LOCKS),
        T::RlimitSigpending => ("RLIMIT_SIGPENDING", Resource::RLIMIT_SIGPENDING),
        T::RlimitMsgqueue => ("RLIMIT_MSGQUEUE", Resource::RLIMIT_MSGQUEUE),
        T::RlimitNice => ("RLIMIT_NICE", Resource::RLIMIT_NICE),
        T::RlimitRtprio => ("RLIMIT_RTPRIO", Resource::RLIMIT_RTPRIO),
        T::RlimitRttime => ("RLIMIT_RTTIME", Resource::RLIMIT_RTTIME),
    }
}

/// Applies every limit in order; the first failure is returned.
pub(super) fn apply(limits: &[PosixRlimit]) -> Result<(), ProcessError> {
    limits.iter().try_for_each(apply_one)
}

fn apply_one(limit: &PosixRlimit) -> Result<(), ProcessError> {
    let (name, res) = resource(limit.typ());
    let (soft, hard) = (limit.soft(), limit.hard());
    let Err(errno) = setrlimit(res, soft, hard) else {
        return Ok(());
    };
    match getrlimit(res) {
        Ok((_, current)) if errno == nix::errno::Errno::EPERM && hard > current => {
            Err(ProcessError::RlimitHardRaise {
                name,
                requested: hard,
                current,
                source: errno.into(),
            })
        }
        _ => Err(ProcessError::Rlimit {
            name,
            soft,
            hard,
            source: errno.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_spec() {
        let nofile: PosixRlimitType = serde_json::from_str("\"RLIMIT_NOFILE\"").unwrap();
        assert_eq!(resource(nofile), ("RLIMIT_NOFILE", Resource::RLIMIT_NOFILE));
        let rttime: PosixRlimitType = serde_json::from_str("\"RLIMIT_RTTIME\"").unwrap();
        assert_eq!(resource(rttime), ("RLIMIT_RTTIME", Resource::RLIMIT_RTTIME));
    }

    #[test]
    fn every_name_roundtrips_through_serde() {
        use PosixRlimitType as T;
        let all = [
            T::RlimitCpu,
            T::RlimitFsize,
            T::RlimitData,
            T::RlimitStack,
            T::RlimitCore,
            T::RlimitRss,
            T::RlimitNproc,
            T::RlimitNofile,
            T::RlimitMemlock,
            T::RlimitAs,
            T::RlimitLocks,
            T::RlimitSigpending,
            T::RlimitMsgqueue,
            T::RlimitNice,
            T::RlimitRtprio,
            T::RlimitRttime,
        ];
        for t in all {
            let (name, _) = resource(t);
            let parsed: PosixRlimitType = serde_json::from_value(name.into()).unwrap();
            assert_eq!(parsed, t, "{name}");
        }
    }

    #[test]
    fn lowering_the_soft_limit_applies() {
        let (soft, hard) = getrlimit(Resource::RLIMIT_CORE).unwrap();
        let limit: PosixRlimit = serde_json::from_value(
            serde_json::json!({"type": "RLIMIT_CORE", "soft": 0, "hard": hard}),
        )
        .unwrap();
        apply(&[limit]).unwrap();
        assert_eq!(getrlimit(Resource::RLIMIT_CORE).unwrap(), (0, hard));
        setrlimit(Resource::RLIMIT_CORE, soft, hard).unwrap();
    }
}
