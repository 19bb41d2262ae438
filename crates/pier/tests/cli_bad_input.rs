//! Black-box tests of issue 2's "Bad input": each mistake makes pier exit 1 with a message that
//! names the file, field or value at fault, and leaves nothing behind (nothing under --root, no
//! mount, no process, no cgroup). Needs root (skips outside CI without it).
mod support;

use serde_json::{json, Value};
use support::{assert_no_trace, require_root, unique_id, Bundle, Pier};

/// `pier create` on `bundle` fails naming `culprit`, and leaves no trace.
fn create_fails_naming(bundle: &Bundle, id: &str, culprit: &str) {
    let pier = Pier::new();
    let stderr = pier.fails(&["create", "--bundle", bundle.path().to_str().unwrap(), id]);
    assert!(stderr.starts_with("pier: "), "{stderr}");
    assert!(
        stderr.contains(culprit),
        "the error does not name {culprit:?}: {stderr}"
    );
    assert_no_trace(&pier, bundle, id);
}

#[test]
fn missing_config_json_is_named() {
    if !require_root("missing_config_json_is_named") {
        return;
    }
    let bundle = Bundle::without_config();
    let config = bundle.config_path();
    create_fails_naming(&bundle, &unique_id("noconfig"), config.to_str().unwrap());
}

#[test]
fn malformed_config_json_is_named() {
    if !require_root("malformed_config_json_is_named") {
        return;
    }
    let bundle = Bundle::busybox(&["true"]);
    std::fs::write(
        bundle.config_path(),
        "{\"ociVersion\": \"1.0.2\", \"process\": ",
    )
    .unwrap();
    let config = bundle.config_path();
    create_fails_naming(&bundle, &unique_id("badjson"), config.to_str().unwrap());
}

#[test]
fn missing_rootfs_is_named() {
    if !require_root("missing_rootfs_is_named") {
        return;
    }
    let bundle = Bundle::busybox(&["true"]);
    bundle.edit_config(|c| c["root"]["path"] = json!("no-such-rootfs"));
    create_fails_naming(&bundle, &unique_id("norootfs"), "no-such-rootfs");
}

#[test]
fn missing_mount_source_is_named() {
    if !require_root("missing_mount_source_is_named") {
        return;
    }
    let bundle = Bundle::busybox(&["true"]);
    let source = bundle.path().join("pier-test-no-such-source");
    bundle.edit_config(|c| {
        let mount = json!({"destination": "/mnt", "type": "bind", "source": source,
                           "options": ["rbind", "ro"]});
        c["mounts"].as_array_mut().unwrap().push(mount);
    });
    create_fails_naming(&bundle, &unique_id("nosource"), source.to_str().unwrap());
}

#[test]
fn invalid_ids_are_named_and_nothing_escapes_the_root() {
    if !require_root("invalid_ids_are_named_and_nothing_escapes_the_root") {
        return;
    }
    let bundle = Bundle::busybox(&["true"]);
    let pier = Pier::new();
    let escape = format!("../{}", unique_id("escape"));
    for id in [escape.as_str(), "a/b", "..", "with space", "semi;colon"] {
        let stderr = pier.fails(&["create", "--bundle", bundle.path().to_str().unwrap(), id]);
        assert!(
            stderr.contains(id),
            "the error does not name {id:?}: {stderr}"
        );
        assert!(
            pier.root_entries().is_empty(),
            "{id:?} left {:?}",
            pier.root_entries()
        );
    }
    assert!(
        !pier.root().join(&escape).exists(),
        "{escape} was created beside --root"
    );
    let stderr = pier.fails(&["create", "--bundle", bundle.path().to_str().unwrap(), ""]);
    assert!(stderr.contains("id"), "{stderr}");
}

#[test]
fn duplicate_id_is_refused_and_the_first_container_survives() {
    if !require_root("duplicate_id_is_refused_and_the_first_container_survives") {
        return;
    }
    let bundle = Bundle::busybox(&["sleep", "1000"]);
    let other = Bundle::busybox(&["true"]);
    let pier = Pier::new();
    let id = unique_id("dup");
    pier.ok(&["create", "--bundle", bundle.path().to_str().unwrap(), &id]);
    let before = pier.state(&id);
    let stderr = pier.fails(&["create", "--bundle", other.path().to_str().unwrap(), &id]);
    assert!(
        stderr.contains(&id),
        "the error does not name {id}: {stderr}"
    );
    assert!(stderr.contains("exists"), "{stderr}");
    let after = pier.state(&id);
    assert_eq!(before, after, "the first container changed");
    assert!(support::processes_of(&id, &other.rootfs())
        .iter()
        .all(|p| *p == after["pid"]));
    pier.ok(&["delete", "--force", &id]);
    assert_no_trace(&pier, &bundle, &id);
}

#[test]
fn unknown_signal_leaves_the_container_alone() {
    if !require_root("unknown_signal_leaves_the_container_alone") {
        return;
    }
    let bundle = Bundle::busybox(&["sleep", "1000"]);
    let pier = Pier::new();
    let id = unique_id("sig");
    pier.ok(&[
        "run",
        "-d",
        "--bundle",
        bundle.path().to_str().unwrap(),
        &id,
    ]);
    let stderr = pier.fails(&["kill", &id, "SIGNOPE"]);
    assert!(stderr.contains("SIGNOPE"), "{stderr}");
    assert_eq!(pier.state(&id)["status"], Value::from("running"));
    pier.ok(&["delete", "--force", &id]);
    assert_no_trace(&pier, &bundle, &id);
}
