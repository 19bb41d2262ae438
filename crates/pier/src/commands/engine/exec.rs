//! `pier exec`: runs another process in a running container; exits with its exit code.
use pier_engine::engine::{Engine, ExecArgs};

/// Flags of `exec`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Run a command in a running container",
    after_help = "Examples:\n  pier exec web cat /etc/hosts\n  pier exec -it web sh\n  \
pier exec -e DEBUG=1 -u 1000 -w /tmp web env"
)]
pub struct Args {
    /// Run in the background
    #[arg(short = 'd', long)]
    detach: bool,
    /// Keep stdin open and pass it to the process
    #[arg(short = 'i', long)]
    interactive: bool,
    /// Give the process a terminal
    #[arg(short = 't', long)]
    tty: bool,
    /// Set an environment variable (repeatable)
    #[arg(short = 'e', long, value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// User: NAME|UID[:GROUP|GID]
    #[arg(short = 'u', long, value_name = "USER")]
    user: Option<String>,
    /// Working directory inside the container
    #[arg(short = 'w', long, value_name = "DIR")]
    workdir: Option<String>,
    /// Container name or id
    container: String,
    /// The command and its arguments
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<String>,
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    let exec = ExecArgs {
        interactive: args.interactive,
        tty: args.tty,
        env: args.env,
        user: args.user,
        workdir: args.workdir,
        detach: args.detach,
        command: args.command,
    };
    Ok(engine.exec(&args.container, &exec)?)
}
