//! `pier network create|ls|inspect|rm`: the engine's networks (pier-engine's `Networks`).
//!
//! `create` checks its flags here (subnets, gateways, driver, `-o KEY=VALUE`) and leaves the
//! rest — overlap with host routes and other networks, the parent interface, ipvlan's presence in
//! the kernel, a bridge gateway mode given to macvlan or ipvlan — to the engine, which refuses
//! before creating anything. `inspect` prints the records, Docker's options under `options`.
use anyhow::{bail, Context};
use pier_engine::engine::Engine;
use pier_engine::network::{
    Driver, GatewayMode, Network, NetworkSpec, GATEWAY_MODE_IPV4, GATEWAY_MODE_IPV6,
};
use pier_net::Subnet;
use std::net::IpAddr;

/// `pier network` and its verbs.
#[derive(clap::Args, Debug)]
#[command(
    about = "Manage networks (bridge, macvlan, ipvlan)",
    after_help = "Example:\n  pier network create --subnet 198.18.5.0/24 backend\n  \
pier run -d --network backend --name db host sleep infinity\n  pier network ls\n  \
pier network inspect backend\n  pier rm -f db; pier network rm backend"
)]
pub struct Args {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(clap::Subcommand, Debug)]
enum Verb {
    Create(CreateArgs),
    #[command(visible_alias = "list")]
    Ls(LsArgs),
    Inspect(NamesArgs),
    #[command(visible_alias = "remove")]
    Rm(NamesArgs),
}

const CREATE_HELP: &str = "\
Without --subnet a bridge network gets a subnet from the pool (PIER_SUBNET_POOL) that no host
route and no other network uses. macvlan containers cannot reach the host through the parent
(the kernel's rule); --host-shim adds a host-side macvlan so they can. This kernel may lack
ipvlan: pier says so, and macvlan is the alternative.

Gateway modes (bridge, as Docker 28): -o com.docker.network.bridge.gateway_mode_ipv4=routed (and
..._ipv6=routed) makes that family of the network routed: its egress keeps the containers'
addresses (no masquerade) and hosts with a route to the subnet via this host reach its
containers directly, without -p; the default, nat, masquerades egress and drops traffic routed
to container addresses from outside. Other pier networks stay isolated either way.

Example:
  pier network create --subnet 198.18.5.0/24 backend
  pier network create --ipv6 --subnet 198.18.6.0/24 --subnet6 2001:2:0:6::/64 dual
  pier network create -d macvlan --parent eth0 --subnet 192.168.1.0/24 --gateway 192.168.1.1 --host-shim lan
  pier network create --subnet 198.18.7.0/24 -o com.docker.network.bridge.gateway_mode_ipv4=routed lab";

/// Flags of `network create`.
#[derive(clap::Args, Debug)]
#[command(about = "Create a network", after_help = CREATE_HELP)]
struct CreateArgs {
    /// bridge, macvlan or ipvlan
    #[arg(short = 'd', long, value_name = "DRIVER", value_parser = parse_driver)]
    driver: Option<Driver>,
    /// Subnet in CIDR form; an IPv6 one counts as --subnet6 (repeatable, one per family)
    #[arg(long, value_name = "CIDR")]
    subnet: Vec<Subnet>,
    /// Gateway address; an IPv6 one counts as --gateway6 (repeatable, one per family)
    #[arg(long, value_name = "ADDRESS")]
    gateway: Vec<IpAddr>,
    /// Parent interface (macvlan, ipvlan)
    #[arg(long, value_name = "IFACE")]
    parent: Option<String>,
    /// ipvlan mode: l2 or l3
    #[arg(long, value_name = "MODE", value_parser = ["l2", "l3"])]
    ipvlan_mode: Option<String>,
    /// Driver option as Docker spells it: parent=IFACE, ipvlan_mode=l2|l3,
    /// com.docker.network.bridge.gateway_mode_ipv4=nat|routed, ..._ipv6=nat|routed (repeatable)
    #[arg(short = 'o', long = "opt", value_name = "KEY=VALUE")]
    opts: Vec<String>,
    /// Give containers IPv6 addresses too
    #[arg(long)]
    ipv6: bool,
    /// IPv6 subnet
    #[arg(long, value_name = "CIDR")]
    subnet6: Option<Subnet>,
    /// IPv6 gateway
    #[arg(long, value_name = "ADDRESS")]
    gateway6: Option<IpAddr>,
    /// macvlan: add a host-side macvlan so the host can reach the containers
    #[arg(long)]
    host_shim: bool,
    /// Network name
    name: String,
}

/// Flags of `network ls`.
#[derive(clap::Args, Debug)]
#[command(about = "List networks")]
struct LsArgs {
    /// Print only the names
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Output format: table, or json (one object per line)
    #[arg(long, value_name = "FORMAT", value_parser = ["table", "json"], default_value = "table")]
    format: String,
}

/// Networks named on the command line.
#[derive(clap::Args, Debug)]
#[command(about = "Show networks as JSON (inspect) or remove them (rm)")]
struct NamesArgs {
    /// Network names
    #[arg(required = true)]
    names: Vec<String>,
}

fn parse_driver(text: &str) -> Result<Driver, String> {
    match text {
        "bridge" => Ok(Driver::Bridge),
        "macvlan" => Ok(Driver::Macvlan),
        "ipvlan" => Ok(Driver::Ipvlan),
        _ => Err(format!(
            "unknown driver {text:?}: bridge, macvlan or ipvlan"
        )),
    }
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    let networks = engine.networks();
    match args.verb {
        Verb::Create(create) => {
            let network = networks.create(&create.into_spec()?)?;
            println!("{}", network.id);
            Ok(0)
        }
        Verb::Ls(ls) => {
            print!("{}", list(&networks.list()?, &ls)?);
            Ok(0)
        }
        Verb::Inspect(names) => {
            let mut found = Vec::new();
            let code = super::for_each(&names.names, |name| {
                found.push(networks.get(name)?);
                Ok(())
            });
            println!("{}", serde_json::to_string_pretty(&found)?);
            Ok(code)
        }
        Verb::Rm(names) => Ok(super::for_each(&names.names, |name| {
            networks.remove(name)?;
            println!("{name}");
            Ok(())
        })),
    }
}

impl CreateArgs {
    fn into_spec(self) -> anyhow::Result<NetworkSpec> {
        let (subnet, subnet6) = by_family("--subnet", &self.subnet, self.subnet6, |s| s.is_ipv4())?;
        let (gateway, gateway6) =
            by_family("--gateway", &self.gateway, self.gateway6, |g| g.is_ipv4())?;
        let mut spec = NetworkSpec {
            name: self.name,
            driver: self.driver,
            subnet,
            gateway,
            parent: self.parent,
            ipvlan_mode: self.ipvlan_mode,
            ipv6: self.ipv6 || subnet6.is_some(),
            subnet6,
            gateway6,
            host_shim: self.host_shim,
            options: Default::default(),
        };
        for opt in &self.opts {
            apply_opt(&mut spec, opt)?;
        }
        Ok(spec)
    }
}

/// Splits repeated values into the IPv4 one and the IPv6 one (plus an explicit `…6` flag).
fn by_family<T: Copy + std::fmt::Display>(
    flag: &str,
    values: &[T],
    explicit6: Option<T>,
    is_v4: impl Fn(&T) -> bool,
) -> anyhow::Result<(Option<T>, Option<T>)> {
    let (v4, v6): (Vec<T>, Vec<T>) = values.iter().partition(|v| is_v4(v));
    let v6: Vec<T> = v6.into_iter().chain(explicit6).collect();
    if let Some(bad) = v6.iter().find(|v| is_v4(v)) {
        bail!("{flag}6 {bad}: not an IPv6 value");
    }
    if v4.len() > 1 || v6.len() > 1 {
        bail!("{flag}: at most one IPv4 and one IPv6 value");
    }
    Ok((v4.first().copied(), v6.first().copied()))
}

/// `-o parent=IFACE`, `-o ipvlan_mode=l2|l3`, `-o com.docker.network.bridge.gateway_mode_ipv4=
/// nat|routed` (and `_ipv6`; a sublink driver refuses them in the engine, naming the key).
fn apply_opt(spec: &mut NetworkSpec, opt: &str) -> anyhow::Result<()> {
    let (key, value) = opt
        .split_once('=')
        .with_context(|| format!("-o {opt:?}: expected KEY=VALUE"))?;
    match key {
        "parent" => spec.parent = Some(value.to_string()),
        "ipvlan_mode" if matches!(value, "l2" | "l3") => spec.ipvlan_mode = Some(value.to_string()),
        "ipvlan_mode" => bail!("-o ipvlan_mode={value:?}: l2 or l3"),
        GATEWAY_MODE_IPV4 => spec.options.gateway_mode_ipv4 = gateway_mode(key, value)?,
        GATEWAY_MODE_IPV6 => spec.options.gateway_mode_ipv6 = gateway_mode(key, value)?,
        _ => bail!(
            "-o {key:?}: unknown option (parent, ipvlan_mode, {GATEWAY_MODE_IPV4}, \
             {GATEWAY_MODE_IPV6})"
        ),
    }
    Ok(())
}

/// Docker's gateway modes pier has: `nat` and `routed`.
fn gateway_mode(key: &str, value: &str) -> anyhow::Result<GatewayMode> {
    match value {
        "nat" => Ok(GatewayMode::Nat),
        "routed" => Ok(GatewayMode::Routed),
        _ => bail!("-o {key}={value:?}: nat or routed (Docker's nat-unprotected and isolated are not supported)"),
    }
}

fn list(networks: &[Network], args: &LsArgs) -> anyhow::Result<String> {
    let mut text = String::new();
    for n in networks {
        let line = if args.quiet {
            n.name.clone()
        } else if args.format == "json" {
            serde_json::to_string(n)?
        } else {
            let driver = format!("{:?}", n.driver).to_lowercase();
            let id = &n.id[..n.id.len().min(12)];
            format!(
                "{id:<12}   {:<16}   {driver:<7}   {:<18}   {}",
                n.name, n.subnet, n.interface
            )
        };
        text += line.trim_end();
        text.push('\n');
    }
    if !args.quiet && args.format == "table" {
        let header = format!(
            "{:<12}   {:<16}   {:<7}   {:<18}   INTERFACE\n",
            "NETWORK ID", "NAME", "DRIVER", "SUBNET"
        );
        text.insert_str(0, &header);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::engine::tests::parse;

    fn spec(line: &str) -> anyhow::Result<NetworkSpec> {
        let cli = parse(line).unwrap();
        let crate::commands::engine::Verb::Network(Args {
            verb: Verb::Create(create),
        }) = cli.command
        else {
            panic!("{line}: not network create");
        };
        create.into_spec()
    }

    #[test]
    fn subnets_and_gateways_sort_by_family() {
        let s = spec(
            "network create --subnet 198.18.5.0/24 --subnet 2001:2:0:5::/64 --gateway 198.18.5.1 n",
        )
        .unwrap();
        assert_eq!(s.subnet.unwrap().to_string(), "198.18.5.0/24");
        assert_eq!(s.subnet6.unwrap().to_string(), "2001:2:0:5::/64");
        assert_eq!(s.gateway.unwrap().to_string(), "198.18.5.1");
        assert!(s.ipv6);
        assert_eq!(s.name, "n");
        let err =
            spec("network create --subnet 198.18.5.0/24 --subnet 198.18.6.0/24 n").unwrap_err();
        assert!(err.to_string().contains("--subnet"), "{err}");
        let err = spec("network create --subnet6 198.18.5.0/24 n").unwrap_err();
        assert!(err.to_string().contains("198.18.5.0/24"), "{err}");
    }

    #[test]
    fn docker_driver_options() {
        let s = spec("network create -d macvlan -o parent=eth9 --host-shim n").unwrap();
        assert_eq!(s.driver, Some(Driver::Macvlan));
        assert_eq!(s.parent.as_deref(), Some("eth9"));
        assert!(s.host_shim);
        let s = spec("network create --driver ipvlan -o ipvlan_mode=l3 --parent eth0 n").unwrap();
        assert_eq!(s.ipvlan_mode.as_deref(), Some("l3"));
        assert!(spec("network create -o mtu=9000 n")
            .unwrap_err()
            .to_string()
            .contains("mtu"));
        assert!(parse("network create -d overlay n").is_err());
        let s = spec(&format!(
            "network create -o {GATEWAY_MODE_IPV4}=routed -o {GATEWAY_MODE_IPV6}=nat n"
        ))
        .unwrap();
        assert_eq!(s.options.gateway_mode_ipv4, GatewayMode::Routed);
        assert_eq!(s.options.gateway_mode_ipv6, GatewayMode::Nat);
        let err = spec(&format!("network create -o {GATEWAY_MODE_IPV6}=isolated n")).unwrap_err();
        assert!(
            err.to_string().contains("gateway_mode_ipv6=\"isolated\""),
            "{err}"
        );
        assert!(parse("network create --subnet 198.18.5.0 n").is_err());
    }
}
