//! `pier update`: changes a container's cgroup limits, from a LinuxResources JSON or from flags.
use anyhow::{bail, Context};
use oci_spec::runtime::{LinuxBlockIo, LinuxCpu, LinuxMemory, LinuxPids, LinuxResources};
use pier_runtime::Runtime;
use std::io::Read;
use std::path::PathBuf;

/// Flags of `update`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Change the cgroup limits of a running container",
    long_about = "Change the resource limits of a container. --resources reads the OCI \
LinuxResources JSON (the linux.resources object of config.json) from FILE or, with -, from \
stdin; the other flags are then ignored. Sizes take k, m, g suffixes.\n\n\
Example:\n  pier update --memory 256m --cpu-quota 50000 web\n  \
echo '{\"pids\":{\"limit\":64}}' | pier update --resources - web"
)]
pub struct Args {
    /// LinuxResources JSON from FILE, or - for stdin
    #[arg(short = 'r', long, value_name = "FILE")]
    pub resources: Option<PathBuf>,
    /// Block IO weight (10 to 1000)
    #[arg(long, value_name = "N")]
    pub blkio_weight: Option<u16>,
    /// CFS period in microseconds
    #[arg(long, value_name = "USECS")]
    pub cpu_period: Option<u64>,
    /// CFS quota in microseconds per period (-1: none)
    #[arg(long, value_name = "USECS", allow_hyphen_values = true)]
    pub cpu_quota: Option<i64>,
    /// CPU shares (relative weight)
    #[arg(long, visible_alias = "cpu-shares", value_name = "N")]
    pub cpu_share: Option<u64>,
    /// Realtime period in microseconds
    #[arg(long, value_name = "USECS")]
    pub cpu_rt_period: Option<u64>,
    /// Realtime runtime in microseconds per period
    #[arg(long, value_name = "USECS")]
    pub cpu_rt_runtime: Option<i64>,
    /// CPUs allowed (e.g. 0-1)
    #[arg(long, value_name = "LIST")]
    pub cpuset_cpus: Option<String>,
    /// Memory nodes allowed (e.g. 0)
    #[arg(long, value_name = "LIST")]
    pub cpuset_mems: Option<String>,
    /// Memory limit in bytes (k, m, g suffixes; -1: none)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub memory: Option<i64>,
    /// Memory soft limit in bytes
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub memory_reservation: Option<i64>,
    /// Memory plus swap limit in bytes (-1: unlimited swap)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub memory_swap: Option<i64>,
    /// Maximum number of processes (-1 or 0: none)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub pids_limit: Option<i64>,
    /// Container id
    pub id: String,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    let resources = match &args.resources {
        Some(path) => read_resources(path)?,
        None => from_flags(&args),
    };
    rt.update(&args.id, &resources)?;
    Ok(0)
}

fn read_resources(path: &std::path::Path) -> anyhow::Result<LinuxResources> {
    if path.as_os_str() != "-" {
        return super::read_json(path);
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading resources from stdin")?;
    serde_json::from_str(&text).context("parsing the resources on stdin as LinuxResources JSON")
}

fn from_flags(args: &Args) -> LinuxResources {
    let mut resources = LinuxResources::default();
    if args.memory.is_some() || args.memory_reservation.is_some() || args.memory_swap.is_some() {
        let mut memory = LinuxMemory::default();
        memory.set_limit(args.memory);
        memory.set_reservation(args.memory_reservation);
        memory.set_swap(args.memory_swap);
        resources.set_memory(Some(memory));
    }
    let cpu_flags = [
        args.cpu_period.is_some(),
        args.cpu_quota.is_some(),
        args.cpu_share.is_some(),
        args.cpu_rt_period.is_some(),
        args.cpu_rt_runtime.is_some(),
        args.cpuset_cpus.is_some(),
        args.cpuset_mems.is_some(),
    ];
    if cpu_flags.contains(&true) {
        let mut cpu = LinuxCpu::default();
        cpu.set_period(args.cpu_period);
        cpu.set_quota(args.cpu_quota);
        cpu.set_shares(args.cpu_share);
        cpu.set_realtime_period(args.cpu_rt_period);
        cpu.set_realtime_runtime(args.cpu_rt_runtime);
        cpu.set_cpus(args.cpuset_cpus.clone());
        cpu.set_mems(args.cpuset_mems.clone());
        resources.set_cpu(Some(cpu));
    }
    if let Some(limit) = args.pids_limit {
        let mut pids = LinuxPids::default();
        pids.set_limit(limit);
        resources.set_pids(Some(pids));
    }
    if let Some(weight) = args.blkio_weight {
        let mut block_io = LinuxBlockIo::default();
        block_io.set_weight(Some(weight));
        resources.set_block_io(Some(block_io));
    }
    resources
}

/// A size in bytes with an optional binary suffix (`512k`, `256m`, `1g`, `1GiB`), or -1.
fn parse_size(text: &str) -> anyhow::Result<i64> {
    let lower = text.trim().to_ascii_lowercase();
    if lower == "-1" {
        return Ok(-1);
    }
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let shift = match &lower[digits.len()..] {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        suffix => bail!("invalid size {text:?}: unknown suffix {suffix:?}"),
    };
    let number: i64 = digits
        .parse()
        .with_context(|| format!("invalid size {text:?}"))?;
    number
        .checked_mul(1 << shift)
        .filter(|n| *n >= 0)
        .with_context(|| format!("invalid size {text:?}: out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("-1").unwrap(), -1);
        assert!(parse_size("12q").is_err());
        assert!(parse_size("m").is_err());
        assert!(parse_size("-5").is_err());
    }

    #[test]
    fn flags_become_resources() {
        let w = Wrapper::try_parse_from([
            "x",
            "--memory",
            "256m",
            "--cpu-quota",
            "50000",
            "--cpu-period",
            "100000",
            "--cpu-shares",
            "512",
            "--pids-limit",
            "64",
            "--cpuset-cpus",
            "0",
            "web",
        ])
        .unwrap();
        let r = from_flags(&w.args);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["memory"]["limit"], 256 << 20);
        assert_eq!(json["cpu"]["quota"], 50000);
        assert_eq!(json["cpu"]["period"], 100000);
        assert_eq!(json["cpu"]["shares"], 512);
        assert_eq!(json["cpu"]["cpus"], "0");
        assert_eq!(json["pids"]["limit"], 64);
        assert!(json.get("blockIO").is_none());
    }
}
