//! Command-line front end: the clap tree and the dispatch to one module per verb.
pub mod bench;

/// Parses the command line and runs the verb; returns the process exit code.
pub fn main() -> i32 {
    0
}
