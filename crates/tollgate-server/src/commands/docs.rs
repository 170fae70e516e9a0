//! `tollgate completions SHELL` and `tollgate man`: the shell completion
//! scripts and the manual page, generated from the same definitions the
//! parser uses (clap_complete, clap_mangen), so they never drift from the
//! flags.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit;

/// Prints the completion script for `shell`; the exit code.
pub(crate) fn completions(shell: clap_complete::Shell) -> i32 {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tollgate", &mut out);
    emit(&out)
}

/// Prints the manual page: `tollgate(1)`, with every subcommand's own
/// section after it.
pub(crate) fn man() -> i32 {
    let command = Cli::command();
    let mut out = Vec::new();
    let rendered = clap_mangen::Man::new(command.clone())
        .render(&mut out)
        .and_then(|()| subcommands(&command, "tollgate", &mut out));
    match rendered {
        Ok(()) => emit(&out),
        Err(e) => {
            eprintln!("tollgate: cannot render the manual page: {e}");
            exit::SOFTWARE
        }
    }
}

/// Each subcommand of `command` (named `path`), depth first, as a
/// SUBCOMMAND section of the one page: its synopsis, description and
/// options.
fn subcommands(command: &clap::Command, path: &str, out: &mut Vec<u8>) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("{path} {}", sub.get_name());
        writeln!(out, ".SH \"{}\"", name.to_uppercase())?;
        let page = clap_mangen::Man::new(sub.clone().bin_name(name.clone()).display_name(name.clone()));
        page.render_synopsis_section(out)?;
        page.render_description_section(out)?;
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            page.render_options_section(out)?;
        }
        subcommands(sub, &name, out)?;
    }
    Ok(())
}

/// Writes `bytes` to standard output; a reader that stopped early (a
/// closed pipe, `| head`) is not an error.
fn emit(bytes: &[u8]) -> i32 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("tollgate: cannot write to standard output: {e}");
            exit::SOFTWARE
        }
    }
}
