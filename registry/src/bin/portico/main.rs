//! `portico`: the command line for people and scripts. Signs and sends merchant calls, imports
//! and publishes APIs, flips switches, shows the gateways' status and exports the tree.
//!
//! - [`args`]: the commands and their arguments;
//! - [`sign`]: `sign` and `call` (the merchant side);
//! - [`import`]: `import` (drafts from protos, descriptor sets, reflection; whole trees);
//! - [`publish`]: `publish`, `rollback`, `history`;
//! - [`ops`]: `switch`, `status`, `export`, `request`;
//! - [`failover`]: `failover` (a cluster's serving set);
//! - [`notify`]: `notify` (publish a notification on a gateway's internal listener);
//! - [`zk`]: `zk lockdown` (ZooKeeper ACLs, docs/OPERATIONS.md);
//! - [`table`]: the aligned tables of the text output;
//! - [`wait`]: `--wait` of `switch` and `publish` (until every live gateway applied the change).

mod args;
mod failover;
mod import;
mod notify;
mod ops;
mod publish;
mod sign;
mod table;
mod wait;
mod zk;

use args::{Cli, Command};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; an error is the message to print.
async fn run(cli: Cli) -> Result<ExitCode, String> {
    match &cli.command {
        Command::Sign(args) => sign::sign(args),
        Command::Call(args) => sign::call(args).await,
        Command::Import(cmd) => import::import(&cli, cmd).await,
        Command::Publish(args) => publish::publish(&cli, args).await,
        Command::Rollback(args) => publish::rollback(&cli, args).await,
        Command::History(args) => publish::history(&cli, args).await,
        Command::Switch(args) => ops::switch(&cli, args).await,
        Command::Failover(args) => failover::failover(&cli, args).await,
        Command::Status => ops::status(&cli).await,
        Command::Report(args) => ops::report(&cli, args).await,
        Command::Export(args) => ops::export(&cli, args).await,
        Command::Request(args) => ops::request(&cli, args).await,
        Command::Notify(args) => notify::notify(args).await,
        Command::Zk(args::ZkCommand::Lockdown(args)) => zk::lockdown(args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
