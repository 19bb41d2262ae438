//! Scheduling-related attributes of the container process: `oomScoreAdj`, `scheduler`
//! (sched_setattr), `ioPriority` (ioprio_set) and `linux.personality`.
//!
//! Theory of operation: each spec value is mapped to the kernel's number by a pure function
//! (unit-tested here) and applied with one syscall; the kernel validates ranges it owns (nice,
//! RT priority, deadline parameters), pier validates what the syscall would silently truncate
//! (the 3-bit I/O priority level).
//!
//! Privileges: lowering oomScoreAdj, RT policies and RT I/O class need CAP_SYS_RESOURCE /
//! CAP_SYS_NICE / CAP_SYS_ADMIN respectively.
//! Tests: unit tests below; effects in `tests/priv_process.rs`.
use super::ProcessError;
use oci_spec::runtime::{
    IOPriorityClass, LinuxIOPriority, LinuxPersonality, LinuxPersonalityDomain, LinuxSchedulerFlag,
    LinuxSchedulerPolicy, Scheduler,
};
use pier_sys::process::SchedAttr;

/// Writes `process.oomScoreAdj` to `/proc/self/oom_score_adj`.
pub(super) fn set_oom_score_adj(value: i32) -> Result<(), ProcessError> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string())
        .map_err(|source| ProcessError::OomScoreAdj { value, source })
}

/// The kernel's `SCHED_*` number of a spec policy.
pub(super) fn policy_number(policy: LinuxSchedulerPolicy) -> u32 {
    use LinuxSchedulerPolicy as P;
    match policy {
        P::SchedOther => 0,
        P::SchedFifo => 1,
        P::SchedRr => 2,
        P::SchedBatch => 3,
        P::SchedIso => 4,
        P::SchedIdle => 5,
        P::SchedDeadline => 6,
    }
}

/// The kernel's `SCHED_FLAG_*` bit of a spec flag.
pub(super) fn flag_bit(flag: LinuxSchedulerFlag) -> u64 {
    use LinuxSchedulerFlag as F;
    match flag {
        F::SchedResetOnFork => 0x01,
        F::SchedFlagReclaim => 0x02,
        F::SchedFlagDLOverrun => 0x04,
        F::SchedFlagKeepPolicy => 0x08,
        F::SchedFlagKeepParams => 0x10,
        F::SchedFlagUtilClampMin => 0x20,
        F::SchedFlagUtilClampMax => 0x40,
    }
}

/// The spec's name of the deadline-overrun flag, and the spelling oci-spec 0.10 expects.
const DL_OVERRUN: (&str, &str) = ("SCHED_FLAG_DL_OVERRUN", "SCHED_FLAG_D_L_OVERRUN");

/// Rewrites the spec's `SCHED_FLAG_DL_OVERRUN` in a raw `process` JSON object to the spelling
/// oci-spec 0.10 parses (it would reject the whole config otherwise).
pub(super) fn normalize_flags_json(process: &mut serde_json::Value) {
    let flags = process
        .pointer_mut("/scheduler/flags")
        .and_then(|f| f.as_array_mut());
    for flag in flags.into_iter().flatten() {
        if flag.as_str() == Some(DL_OVERRUN.0) {
            *flag = DL_OVERRUN.1.into();
        }
    }
}

/// The `sched_attr` for `process.scheduler`.
pub(super) fn sched_attr(s: &Scheduler) -> SchedAttr {
    SchedAttr {
        policy: policy_number(*s.policy()),
        flags: s
            .flags()
            .iter()
            .flatten()
            .map(|f| flag_bit(*f))
            .fold(0, |a, b| a | b),
        nice: s.nice().unwrap_or(0),
        priority: s.priority().unwrap_or(0).max(0) as u32,
        runtime: s.runtime().unwrap_or(0),
        deadline: s.deadline().unwrap_or(0),
        period: s.period().unwrap_or(0),
    }
}

/// Applies `process.scheduler` with sched_setattr.
pub(super) fn set_scheduler(s: &Scheduler) -> Result<(), ProcessError> {
    pier_sys::process::sched_setattr(&sched_attr(s)).map_err(|source| ProcessError::Scheduler {
        policy: s.policy().to_string(),
        source,
    })
}

/// The kernel's `IOPRIO_CLASS_*` number of a spec class.
pub(super) fn ioprio_class(class: IOPriorityClass) -> u16 {
    match class {
        IOPriorityClass::IoprioClassRt => 1,
        IOPriorityClass::IoprioClassBe => 2,
        IOPriorityClass::IoprioClassIdle => 3,
    }
}

/// Applies `process.ioPriority` with ioprio_set.
pub(super) fn set_io_priority(p: &LinuxIOPriority) -> Result<(), ProcessError> {
    let priority = p.priority();
    let level = u16::try_from(priority)
        .ok()
        .filter(|l| *l <= 7)
        .ok_or(ProcessError::IoPriorityRange { priority })?;
    pier_sys::process::ioprio_set(ioprio_class(p.class()), level).map_err(|source| {
        ProcessError::IoPriority {
            class: p.class().to_string(),
            priority,
            source,
        }
    })
}

/// The kernel's `PER_*` number of a spec domain.
pub(super) fn persona(domain: LinuxPersonalityDomain) -> u32 {
    match domain {
        LinuxPersonalityDomain::PerLinux => 0x0000,
        LinuxPersonalityDomain::PerLinux32 => 0x0008,
    }
}

/// Applies `linux.personality` (the domain; flags are not defined by the spec and only warned).
pub(super) fn set_personality(p: &LinuxPersonality) -> Result<(), ProcessError> {
    if let Some(flags) = p.flags().as_ref().filter(|f| !f.is_empty()) {
        log::warn!("linux.personality flags {flags:?} are not supported and were ignored");
    }
    pier_sys::process::set_personality(persona(p.domain())).map_err(|source| {
        ProcessError::Personality {
            domain: p.domain().to_string(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn scheduler_maps_to_sched_attr() {
        let mut p = serde_json::json!({"scheduler": {
            "policy": "SCHED_DEADLINE", "runtime": 10, "deadline": 20, "period": 30,
            "flags": ["SCHED_RESET_ON_FORK", "SCHED_FLAG_DL_OVERRUN"]
        }});
        normalize_flags_json(&mut p);
        let s: Scheduler = parse(p["scheduler"].take());
        let a = sched_attr(&s);
        assert_eq!(a.policy, libc::SCHED_DEADLINE as u32);
        assert_eq!(
            a.flags,
            (libc::SCHED_FLAG_RESET_ON_FORK | libc::SCHED_FLAG_DL_OVERRUN) as u64
        );
        assert_eq!((a.runtime, a.deadline, a.period), (10, 20, 30));
    }

    #[test]
    fn policies_match_libc() {
        use LinuxSchedulerPolicy as P;
        assert_eq!(policy_number(P::SchedOther), libc::SCHED_OTHER as u32);
        assert_eq!(policy_number(P::SchedFifo), libc::SCHED_FIFO as u32);
        assert_eq!(policy_number(P::SchedRr), libc::SCHED_RR as u32);
        assert_eq!(policy_number(P::SchedBatch), libc::SCHED_BATCH as u32);
        assert_eq!(policy_number(P::SchedIdle), libc::SCHED_IDLE as u32);
    }

    #[test]
    fn io_priority_classes_and_range() {
        let p: LinuxIOPriority =
            parse(serde_json::json!({"class": "IOPRIO_CLASS_IDLE", "priority": 0}));
        assert_eq!(ioprio_class(p.class()), 3);
        let p: LinuxIOPriority =
            parse(serde_json::json!({"class": "IOPRIO_CLASS_BE", "priority": 8}));
        let err = set_io_priority(&p).unwrap_err();
        assert!(
            matches!(err, ProcessError::IoPriorityRange { priority: 8 }),
            "{err}"
        );
    }

    #[test]
    fn personality_domains() {
        let p: LinuxPersonality = parse(serde_json::json!({"domain": "LINUX32"}));
        assert_eq!(persona(p.domain()), 8);
        let p: LinuxPersonality = parse(serde_json::json!({"domain": "LINUX"}));
        assert_eq!(persona(p.domain()), 0);
    }
}
