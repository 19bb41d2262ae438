//! Checking a profile before it is compiled, with errors that say where the problem is.
//!
//! Theory of operation: [`from_json`] walks the raw `linux.seccomp` JSON first, because oci-spec
//! rejects an unknown action, operator, architecture or flag without saying which rule holds
//! it. Every error names the rule (its index and syscall names) and the field. Then the JSON is
//! parsed into oci-spec's type and [`check`] runs the semantic checks that [`crate::compile`]
//! also runs on profiles built in code: argument index 0..=5, errno within 16 bits, only
//! architectures this host runs, NOTIFY only with a `listenerPath` and never as default action.
//! Unknown syscall names are not errors: they are skipped with a debug log, as in runc and crun.
//! Privileges: none. Tests: unit tests below.
use crate::arch::Arch;
use crate::Error;
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction};
use serde_json::Value;

const ACTIONS: &[&str] = &[
    "SCMP_ACT_KILL",
    "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_KILL_PROCESS",
    "SCMP_ACT_TRAP",
    "SCMP_ACT_ERRNO",
    "SCMP_ACT_TRACE",
    "SCMP_ACT_LOG",
    "SCMP_ACT_NOTIFY",
    "SCMP_ACT_ALLOW",
];
const OPS: &[&str] = &[
    "SCMP_CMP_NE",
    "SCMP_CMP_LT",
    "SCMP_CMP_LE",
    "SCMP_CMP_EQ",
    "SCMP_CMP_GE",
    "SCMP_CMP_GT",
    "SCMP_CMP_MASKED_EQ",
];
const FLAGS: &[&str] = &[
    "SECCOMP_FILTER_FLAG_TSYNC",
    "SECCOMP_FILTER_FLAG_LOG",
    "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
];
const HOST_ARCHES: &[&str] = &[
    "SCMP_ARCH_NATIVE",
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X86",
    "SCMP_ARCH_X32",
];
const MAX_ERRNO: u64 = 0xffff;

/// Where in the profile an error is.
#[derive(Clone, Copy)]
enum At<'a> {
    Profile,
    Rule(usize, &'a Value),
    Parsed(usize, &'a [String]),
}

fn invalid(at: At<'_>, field: &str, reason: impl Into<String>) -> Error {
    let location = match at {
        At::Profile => "profile".to_owned(),
        At::Rule(i, rule) => {
            let names: Vec<&str> = rule
                .get("names")
                .and_then(Value::as_array)
                .map(|n| n.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            format!("rule {i} ({})", names.join(", "))
        }
        At::Parsed(i, names) => format!("rule {i} ({})", names.join(", ")),
    };
    Error::Invalid {
        location,
        field: field.to_owned(),
        reason: reason.into(),
    }
}

/// Validates the raw JSON, then parses and checks it.
pub(crate) fn from_json(value: &Value) -> Result<LinuxSeccomp, Error> {
    let obj = value
        .as_object()
        .ok_or_else(|| invalid(At::Profile, "linux.seccomp", "not an object"))?;
    let top = At::Profile;
    let action = obj
        .get("defaultAction")
        .ok_or_else(|| invalid(top, "defaultAction", "missing"))?;
    one_of(top, "defaultAction", action, ACTIONS)?;
    number(
        top,
        "defaultErrnoRet",
        obj.get("defaultErrnoRet"),
        MAX_ERRNO,
    )?;
    for (i, arch) in array(top, "architectures", obj.get("architectures"))?
        .iter()
        .enumerate()
    {
        let field = format!("architectures[{i}]");
        let name = arch
            .as_str()
            .ok_or_else(|| invalid(top, &field, "not a string"))?;
        if !HOST_ARCHES.contains(&name) {
            return Err(invalid(
                top,
                &field,
                format!("{name} cannot run on this x86_64 host"),
            ));
        }
    }
    for (i, flag) in array(top, "flags", obj.get("flags"))?.iter().enumerate() {
        one_of(top, &format!("flags[{i}]"), flag, FLAGS)?;
    }
    for field in ["listenerPath", "listenerMetadata"] {
        if obj
            .get(field)
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            return Err(invalid(top, field, "not a string"));
        }
    }
    for (i, rule) in array(top, "syscalls", obj.get("syscalls"))?
        .iter()
        .enumerate()
    {
        rule_json(At::Rule(i, rule), rule)?;
    }
    let profile: LinuxSeccomp = serde_json::from_value(value.clone()).map_err(Error::Parse)?;
    check(&profile)?;
    Ok(profile)
}

fn rule_json(at: At<'_>, rule: &Value) -> Result<(), Error> {
    if !rule.is_object() {
        return Err(invalid(at, "syscalls[]", "not an object"));
    }
    let names = rule
        .get("names")
        .ok_or_else(|| invalid(at, "names", "missing"))?;
    let names = names
        .as_array()
        .ok_or_else(|| invalid(at, "names", "not an array"))?;
    if names.iter().any(|n| !n.is_string()) {
        return Err(invalid(at, "names", "holds a value that is not a string"));
    }
    let action = rule
        .get("action")
        .ok_or_else(|| invalid(at, "action", "missing"))?;
    one_of(at, "action", action, ACTIONS)?;
    number(at, "errnoRet", rule.get("errnoRet"), MAX_ERRNO)?;
    for (j, arg) in array(at, "args", rule.get("args"))?.iter().enumerate() {
        if !arg.is_object() {
            return Err(invalid(at, &format!("args[{j}]"), "not an object"));
        }
        let field = |f: &str| format!("args[{j}].{f}");
        let index = arg
            .get("index")
            .ok_or_else(|| invalid(at, &field("index"), "missing"))?;
        number(at, &field("index"), Some(index), 5)?;
        let value = arg
            .get("value")
            .ok_or_else(|| invalid(at, &field("value"), "missing"))?;
        number(at, &field("value"), Some(value), u64::MAX)?;
        number(at, &field("valueTwo"), arg.get("valueTwo"), u64::MAX)?;
        let op = arg
            .get("op")
            .ok_or_else(|| invalid(at, &field("op"), "missing"))?;
        one_of(at, &field("op"), op, OPS)?;
    }
    Ok(())
}

fn one_of(at: At<'_>, field: &str, v: &Value, known: &[&str]) -> Result<(), Error> {
    match v.as_str() {
        Some(s) if known.contains(&s) => Ok(()),
        Some(s) => Err(invalid(
            at,
            field,
            format!("unknown value {s:?} (known: {})", known.join(", ")),
        )),
        None => Err(invalid(at, field, "not a string")),
    }
}

fn number(at: At<'_>, field: &str, v: Option<&Value>, max: u64) -> Result<(), Error> {
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(v) => match v.as_u64() {
            Some(n) if n <= max => Ok(()),
            Some(n) => Err(invalid(at, field, format!("{n} is out of range 0..={max}"))),
            None => Err(invalid(
                at,
                field,
                format!("{v} is not an integer in 0..={max}"),
            )),
        },
    }
}

fn array<'a>(at: At<'_>, field: &str, v: Option<&'a Value>) -> Result<&'a [Value], Error> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(invalid(at, field, "not an array")),
    }
}

/// Semantic checks on a parsed profile; returns the architectures to compile for.
pub(crate) fn check(profile: &LinuxSeccomp) -> Result<Vec<Arch>, Error> {
    let mut arches = Vec::with_capacity(3);
    for (i, a) in profile
        .architectures()
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let field = format!("architectures[{i}]");
        let arch = Arch::from_oci(*a).ok_or_else(|| {
            invalid(
                At::Profile,
                &field,
                format!("{a} cannot run on this x86_64 host"),
            )
        })?;
        if !arches.contains(&arch) {
            arches.push(arch);
        }
    }
    if arches.is_empty() {
        arches.push(Arch::X86_64);
    }
    if profile
        .default_errno_ret()
        .is_some_and(|e| u64::from(e) > MAX_ERRNO)
    {
        return Err(invalid(
            At::Profile,
            "defaultErrnoRet",
            "out of range 0..=65535",
        ));
    }
    if profile.default_action() == LinuxSeccompAction::ScmpActNotify {
        return Err(invalid(
            At::Profile,
            "defaultAction",
            "SCMP_ACT_NOTIFY cannot be the default action",
        ));
    }
    let has_listener = profile
        .listener_path()
        .as_ref()
        .is_some_and(|p| !p.as_os_str().is_empty());
    for (i, rule) in profile
        .syscalls()
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        check_rule(i, rule, has_listener)?;
    }
    Ok(arches)
}

fn check_rule(
    i: usize,
    rule: &oci_spec::runtime::LinuxSyscall,
    has_listener: bool,
) -> Result<(), Error> {
    let at = At::Parsed(i, rule.names());
    if rule.errno_ret().is_some_and(|e| u64::from(e) > MAX_ERRNO) {
        return Err(invalid(at, "errnoRet", "out of range 0..=65535"));
    }
    if rule.action() == LinuxSeccompAction::ScmpActNotify && !has_listener {
        return Err(invalid(
            at,
            "action",
            "SCMP_ACT_NOTIFY needs linux.seccomp.listenerPath",
        ));
    }
    for (j, arg) in rule
        .args()
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        if arg.index() > 5 {
            return Err(invalid(
                at,
                &format!("args[{j}].index"),
                format!("{} is out of range 0..=5", arg.index()),
            ));
        }
    }
    for name in rule.names() {
        if !crate::names::known(name) {
            log::debug!("seccomp: rule {i}: unknown syscall {name:?} ignored");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        from_json(&v).unwrap_err().to_string()
    }

    #[test]
    fn unknown_action_names_rule_and_field() {
        let e = err(json!({"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
            {"names":["read"],"action":"SCMP_ACT_ALLOW"},
            {"names":["mount","umount2"],"action":"SCMP_ACT_EXPLODE"}]}));
        assert!(
            e.contains("rule 1 (mount, umount2)")
                && e.contains("`action`")
                && e.contains("SCMP_ACT_EXPLODE"),
            "{e}"
        );
    }

    #[test]
    fn bad_index_op_and_arch_are_named() {
        let e = err(json!({"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
            {"names":["kill"],"action":"SCMP_ACT_ERRNO","args":[{"index":6,"value":1,"op":"SCMP_CMP_EQ"}]}]}));
        assert!(
            e.contains("rule 0 (kill)") && e.contains("args[0].index"),
            "{e}"
        );
        let e = err(json!({"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
            {"names":["kill"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"SCMP_CMP_ABOUT"}]}]}));
        assert!(
            e.contains("args[0].op") && e.contains("SCMP_CMP_ABOUT"),
            "{e}"
        );
        let e =
            err(json!({"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_AARCH64"]}));
        assert!(
            e.contains("architectures[0]") && e.contains("cannot run"),
            "{e}"
        );
    }

    #[test]
    fn notify_needs_listener_path() {
        let e = err(json!({"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
            {"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}));
        assert!(
            e.contains("rule 0 (mkdir)") && e.contains("listenerPath"),
            "{e}"
        );
    }

    #[test]
    fn valid_profile_parses_and_unknown_names_pass() {
        let p = from_json(&json!({"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,
            "architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X32"],"flags":["SECCOMP_FILTER_FLAG_LOG"],
            "syscalls":[{"names":["read","not_a_syscall"],"action":"SCMP_ACT_ALLOW",
            "args":[{"index":0,"value":3,"valueTwo":1,"op":"SCMP_CMP_MASKED_EQ"}]}]}))
        .unwrap();
        assert_eq!(check(&p).unwrap(), vec![Arch::X86_64, Arch::X32]);
    }
}
