//! `baton auth ...`: making tokens and the digests an auth file stores.

use std::io::Read;

use baton_api::auth::hash_token;
use baton_raft::Node;
use clap::Subcommand;

/// `baton auth ...`
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Print a new random bearer token (256 bits) and, on the next line, the
    /// digest to put in the auth file's `tokens` list.
    NewToken,
    /// Read a token from standard input (one line) and print its digest.
    HashToken,
}

/// Runs an auth subcommand.
pub fn run(command: &AuthCommand) -> anyhow::Result<()> {
    match command {
        AuthCommand::NewToken => {
            // Two draws of the same CSPRNG lease ids come from.
            let token = format!(
                "baton_{:032x}{:032x}",
                Node::new_lease_id().0,
                Node::new_lease_id().0
            );
            println!("{token}");
            println!("{}", hash_token(&token));
        }
        AuthCommand::HashToken => {
            let mut input = String::new();
            std::io::stdin().read_to_string(&mut input)?;
            let token = input.trim_end_matches(['\r', '\n']);
            anyhow::ensure!(!token.is_empty(), "no token on standard input");
            println!("{}", hash_token(token));
        }
    }
    Ok(())
}
