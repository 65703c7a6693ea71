//! The `backfill` command. Everything it does is in the library,
//! [`backfill_cli`].

fn main() -> std::process::ExitCode {
    backfill_cli::main()
}
