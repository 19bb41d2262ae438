//! OCI hooks. INTERFACE STUB: the process helper replaces the body.
use oci_spec::runtime::Hook;

/// The lifecycle point a hook list belongs to (named as in config.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `hooks.prestart` (deprecated, runs with createRuntime).
    Prestart,
    /// `hooks.createRuntime`: runtime namespace, after the container's namespaces exist.
    CreateRuntime,
    /// `hooks.createContainer`: container namespace, before pivot_root.
    CreateContainer,
    /// `hooks.startContainer`: container namespace, before the user program.
    StartContainer,
    /// `hooks.poststart`: runtime namespace, after the user program started.
    Poststart,
    /// `hooks.poststop`: runtime namespace, after the container was deleted.
    Poststop,
}

/// What failed while running a hook.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// Placeholder until the hooks module lands.
    #[error("hooks are not built yet")]
    NotBuilt,
}

/// Runs `hooks` in order, each with the OCI state JSON on stdin, honouring `timeout`; the first
/// failure (spawn error, non-zero exit, timeout) stops the list and is returned with the hook's
/// path and phase.
pub fn run(phase: Phase, hooks: &[Hook], state_json: &[u8]) -> Result<(), HookError> {
    let _ = (phase, hooks, state_json);
    Err(HookError::NotBuilt)
}
