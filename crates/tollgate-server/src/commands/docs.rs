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

/// Prints the manual page: `tollgate(1)`, its EXIT STATUS, and every
/// subcommand's own section after it.
pub(crate) fn man() -> i32 {
    let command = Cli::command();
    let mut out = Vec::new();
    let page = clap_mangen::Man::new(command.clone());
    // clap_mangen's SUBCOMMANDS section names a page per subcommand
    // (`tollgate-serve(1)`); here they are sections of this one page.
    let rendered = page
        .render_title(&mut out)
        .and_then(|()| page.render_name_section(&mut out))
        .and_then(|()| page.render_synopsis_section(&mut out))
        .and_then(|()| page.render_description_section(&mut out))
        .and_then(|()| page.render_options_section(&mut out))
        .and_then(|()| subcommand_index(&command, &mut out))
        .and_then(|()| exit_status(&mut out))
        .and_then(|()| page.render_version_section(&mut out))
        .and_then(|()| subcommands(&command, "tollgate", &mut out));
    match rendered {
        Ok(()) => emit(&out),
        Err(e) => {
            eprintln!("tollgate: cannot render the manual page: {e}");
            exit::SOFTWARE
        }
    }
}

/// Roff text: backslashes and hyphens escaped.
fn roff(text: &str) -> String {
    text.replace('\\', "\\\\").replace('-', "\\-")
}

/// The SUBCOMMANDS section: each subcommand, with the section of this
/// page that describes it.
fn subcommand_index(command: &clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    writeln!(out, ".SH SUBCOMMANDS")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("tollgate {}", sub.get_name());
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        writeln!(out, ".TP\n\\fB{}\\fR\n{}", roff(&name), roff(&about))?;
        writeln!(out, "(section {} below)", roff(&name.to_uppercase()))?;
    }
    Ok(())
}

/// The EXIT STATUS section, from [`exit::MEANINGS`].
fn exit_status(out: &mut Vec<u8>) -> std::io::Result<()> {
    writeln!(out, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in exit::MEANINGS {
        let code = code.map_or("the command's own".to_owned(), |c| c.to_string());
        writeln!(out, ".TP\n\\fB{}\\fR\n{}", roff(&code), roff(meaning))?;
    }
    Ok(())
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
