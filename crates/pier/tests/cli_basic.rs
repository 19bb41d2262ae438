//! Black-box tests of the pier binary that need no container: help, version, spec, features,
//! and the command-line errors (unknown subcommand, flag, signal), plus the json log line.
//! No privileges needed.
mod support;

use serde_json::Value;
use std::process::Command;
use support::{describe, temp_dir, Pier, PIER};

fn pier(args: &[&str]) -> std::process::Output {
    Command::new(PIER)
        .args(args)
        .output()
        .expect("running pier")
}

#[test]
fn help_lists_every_verb_with_examples() {
    let out = pier(&["--help"]);
    assert!(out.status.success(), "{}", describe(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    for verb in [
        "create", "start", "run", "state", "kill", "delete", "exec", "ps", "list", "spec",
        "features", "pause", "resume", "update",
    ] {
        assert!(
            help.contains(&format!("\n  {verb} ")),
            "--help lacks {verb}:\n{help}"
        );
        let out = pier(&[verb, "--help"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{verb} --help: {}", describe(&out));
        assert!(
            text.contains("Example:"),
            "{verb} --help has no example:\n{text}"
        );
    }
}

#[test]
fn version_names_pier_and_the_spec() {
    for flag in ["--version", "-v"] {
        let out = pier(&[flag]);
        assert!(out.status.success(), "{}", describe(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("pier version "), "{text}");
        assert!(text.contains("\nspec: 1."), "{text}");
    }
}

#[test]
fn spec_writes_a_valid_config_and_refuses_to_overwrite_it() {
    let dir = temp_dir();
    let out = Command::new(PIER)
        .arg("spec")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let config = dir.path().join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    let spec: oci_spec::runtime::Spec = serde_json::from_str(&text).expect("a valid OCI spec");
    assert!(
        spec.version().starts_with("1."),
        "ociVersion {}",
        spec.version()
    );
    assert_eq!(
        spec.root().as_ref().unwrap().path(),
        std::path::Path::new("rootfs")
    );

    std::fs::write(&config, "keep me").unwrap();
    let out = pier(&["spec", "--bundle", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&config.display().to_string()), "{stderr}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "keep me");
}

#[test]
fn spec_rootless_maps_the_caller() {
    let dir = temp_dir();
    let out = pier(&[
        "spec",
        "--rootless",
        "--bundle",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
    let config: Value = serde_json::from_str(&text).unwrap();
    let uid = nix::unistd::geteuid().as_raw();
    assert_eq!(config["linux"]["uidMappings"][0]["hostID"], uid, "{config}");
    let namespaces = config["linux"]["namespaces"].as_array().unwrap();
    assert!(namespaces.iter().any(|n| n["type"] == "user"), "{config}");
}

#[test]
fn features_is_json_listing_namespaces() {
    let out = pier(&["features"]);
    assert!(out.status.success(), "{}", describe(&out));
    let features: Value = serde_json::from_slice(&out.stdout).expect("features prints JSON");
    let namespaces = features["linux"]["namespaces"]
        .as_array()
        .unwrap_or_else(|| panic!("no linux.namespaces in {features}"));
    for ns in ["pid", "network", "mount", "user", "cgroup"] {
        assert!(
            namespaces.iter().any(|n| n == ns),
            "{ns} missing: {features}"
        );
    }
    assert!(features["ociVersionMax"]
        .as_str()
        .is_some_and(|v| v.starts_with("1.")));
}

#[test]
fn unknown_subcommand_and_flag_fail_with_clap_messages() {
    let out = pier(&["frobnicate"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("frobnicate"),
        "{}",
        describe(&out)
    );
    let out = pier(&["create", "--no-such-flag", "x"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"),
        "{}",
        describe(&out)
    );
    let out = pier(&["--log-format", "xml", "list"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("xml"),
        "{}",
        describe(&out)
    );
}

#[test]
fn unknown_signal_is_named() {
    let pier = Pier::new();
    for signal in ["SIGFOO", "99"] {
        let stderr = pier.fails(&["kill", "some-id", signal]);
        assert!(stderr.starts_with("pier: "), "{stderr}");
        assert!(stderr.contains(&format!("\"{signal}\"")), "{stderr}");
    }
}

#[test]
fn runc_flags_callers_pass_are_accepted() {
    let pier = Pier::new();
    let out = pier.run(&[
        "--criu",
        "criu",
        "--rootless=false",
        "--systemd-cgroup",
        "--debug",
        "list",
        "-q",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("unexpected argument"), "{stderr}");
}

#[test]
fn json_log_gets_a_parseable_error_line() {
    let pier = Pier::new();
    let dir = temp_dir();
    let log = dir.path().join("log.json");
    std::fs::write(
        &log,
        "{\"level\":\"info\",\"msg\":\"earlier\",\"time\":\"x\"}\n",
    )
    .unwrap();
    let log_arg = log.to_str().unwrap();
    let stderr = pier.fails(&[
        "--log",
        log_arg,
        "--log-format",
        "json",
        "state",
        "pier-test-absent",
    ]);
    assert!(stderr.contains("pier-test-absent"), "{stderr}");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "one line appended: {text}");
    let line: Value = serde_json::from_str(lines[1]).expect("a JSON line");
    assert_eq!(line["level"], "error");
    let msg = line["msg"].as_str().unwrap();
    assert!(
        msg.contains("pier-test-absent") && msg.contains("does not exist"),
        "{msg}"
    );
    assert!(
        line["time"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{line}"
    );
}

#[test]
fn proxy_help_is_printed_for_go_style_help_flags() {
    for flag in ["-h", "-help", "--help"] {
        let out = pier(&["proxy", flag]);
        assert!(out.status.success(), "proxy {flag}: {}", describe(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("-container-port") && text.contains("Example:"),
            "{text}"
        );
    }
}

#[test]
fn a_reader_that_went_away_ends_pier_quietly() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(PIER)
        .args(["proxy", "-h"])
        .stdout(writer)
        .output()
        .expect("running pier");
    assert_eq!(out.status.code(), Some(141), "{}", describe(&out));
    assert!(out.stderr.is_empty(), "{}", describe(&out));
}
