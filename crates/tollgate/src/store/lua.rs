//! The Lua loader: a script is an entry file whose `--- @include "name"`
//! lines (at the start of a line, anywhere in the file) name the files it
//! is made of, as BullMQ's scripts do. Each include is replaced by the
//! file's text, its own includes first (depth first, so whatever a file
//! includes comes before it), each file at most once per script (a second
//! include of it adds nothing); an include cycle is refused.
//!
//! A snippet is written once and copied where it is used, so a formula
//! several paths share costs no Lua function call: a file whose header
//! says `--- @snippet a, b` is copied in place of each line
//! `--- @inline "name.lua" a=expr, b=expr` (which may be indented: every
//! line copied is, as much), with each parameter, as a name in its code
//! (not a field, a string or a comment), replaced by its expression, and
//! without the snippet's own comment lines.
//!
//! Scripts are composed once, when the store is made (see `Scripts::new`
//! in store/redis/script.rs): a few string copies per script, never per
//! call, against a build script that would only move that work to build
//! time. The gate's unit tests (gate/scripts.rs) check that each file's
//! `--- @needs` and `--- @defines` headers agree with the composed order
//! and with the code.

/// A Lua file of one set of scripts: the name `--- @include` gives it, and
/// its text.
pub(crate) type LuaFile = (&'static str, &'static str);

/// The directive that includes a file.
pub(crate) const INCLUDE: &str = "--- @include ";

/// One file's own lines in a composed script (a file with an include
/// after some of its lines has several pieces).
#[derive(Debug)]
pub(crate) struct Piece {
    /// (Read by the tests that check the scripts, gate/scripts.rs.)
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) file: &'static str,
    pub(crate) text: String,
}

/// Script `entry` of `files`, its includes resolved.
pub(crate) fn compose(files: &[LuaFile], entry: &str) -> Result<String, String> {
    Ok(pieces(files, entry)?.into_iter().map(|p| p.text).collect())
}

/// Script `entry` of `files` as the pieces it is made of, in order.
pub(crate) fn pieces(files: &[LuaFile], entry: &str) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    include(files, entry, &mut Vec::new(), &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// The directive that copies a snippet in.
pub(crate) const INLINE: &str = "--- @inline ";

/// The header line of a snippet, naming its parameters.
pub(crate) const SNIPPET: &str = "--- @snippet ";

/// The file a directive line names, if it is one.
fn included(line: &str) -> Option<Result<&str, String>> {
    let rest = line.strip_prefix(INCLUDE)?;
    Some(
        rest.trim()
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .ok_or_else(|| format!("malformed include (want {INCLUDE}\"name.lua\"): {line}")),
    )
}

fn include(
    files: &[LuaFile],
    name: &str,
    stack: &mut Vec<&'static str>,
    done: &mut Vec<&'static str>,
    out: &mut Vec<Piece>,
) -> Result<(), String> {
    let Some(&(name, text)) = files.iter().find(|(n, _)| *n == name) else {
        return Err(match stack.last() {
            Some(from) => format!("{from} includes {name}, which is not a known file"),
            None => format!("no script {name}"),
        });
    };
    if stack.contains(&name) {
        return Err(format!("include cycle: {} -> {name}", stack.join(" -> ")));
    }
    if done.contains(&name) {
        return Ok(());
    }
    done.push(name);
    stack.push(name);
    let mut own = String::new();
    for line in text.lines() {
        if let Some(at) = line.find(INLINE).filter(|at| line[..*at].trim().is_empty()) {
            inline(files, &line[..at], &line[at + INLINE.len()..], &mut own)
                .map_err(|e| format!("{name}: {e}"))?;
            continue;
        }
        match included(line) {
            Some(target) => {
                let target = target.map_err(|e| format!("{name}: {e}"))?;
                if !own.is_empty() {
                    out.push(Piece {
                        file: name,
                        text: std::mem::take(&mut own),
                    });
                }
                include(files, target, stack, done, out)?;
            }
            None => {
                own.push_str(line);
                own.push('\n');
            }
        }
    }
    if !own.is_empty() {
        out.push(Piece {
            file: name,
            text: own,
        });
    }
    stack.pop();
    Ok(())
}

/// Copies the snippet `directive` names (`"name.lua" a=expr, ...`) into
/// `out`, each line indented by `indent`.
fn inline(files: &[LuaFile], indent: &str, directive: &str, out: &mut String) -> Result<(), String> {
    let bad = || format!("malformed inline (want {INLINE}\"name.lua\" a=expr, b=expr): {directive}");
    let rest = directive.trim().strip_prefix('"').ok_or_else(bad)?;
    let (name, args) = rest.split_once('"').ok_or_else(bad)?;
    let Some(&(_, text)) = files.iter().find(|(n, _)| *n == name) else {
        return Err(format!("inlines {name}, which is not a known file"));
    };
    let params: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix(SNIPPET))
        .ok_or_else(|| format!("inlines {name}, which is not a snippet"))?
        .split(',')
        .map(str::trim)
        .collect();
    let mut given = Vec::new();
    for arg in split_top(args) {
        let (param, expr) = arg.split_once('=').ok_or_else(bad)?;
        given.push((param.trim(), expr.trim()));
    }
    let mut wanted: Vec<&str> = given.iter().map(|(p, _)| *p).collect();
    wanted.sort_unstable();
    let mut declared = params.clone();
    declared.sort_unstable();
    if wanted != declared {
        return Err(format!(
            "inlines {name} with {wanted:?}, but its parameters are {declared:?}"
        ));
    }
    for line in text.lines() {
        if line.trim_start().starts_with("--") {
            continue;
        }
        out.push_str(indent);
        out.push_str(&substitute(line, &given));
        out.push('\n');
    }
    Ok(())
}

/// `args` split at its commas outside brackets.
fn split_top(args: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut from) = (Vec::new(), 0, 0);
    for (i, c) in args.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&args[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&args[from..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// `line` with each name in `given` (as a name of its code: not a field,
/// nor in a string or a comment) replaced by its expression.
fn substitute(line: &str, given: &[(&str, &str)]) -> String {
    let b = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            out.push_str(&line[i..]);
            break;
        }
        if c == b'\'' || c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != c {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            out.push_str(&line[i..end]);
            i = end;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let len = line[i..]
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(line.len() - i);
            let word = &line[i..i + len];
            let field = i > 0 && b[i - 1] == b'.' && (i < 2 || b[i - 2] != b'.');
            match given.iter().find(|(p, _)| *p == word) {
                Some((_, expr)) if !field => out.push_str(expr),
                _ => out.push_str(word),
            }
            i += len;
            continue;
        }
        if c.is_ascii_digit() {
            let len = line[i..]
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '.'))
                .unwrap_or(line.len() - i);
            out.push_str(&line[i..i + len]);
            i += len;
            continue;
        }
        let ch = line[i..].chars().next().unwrap_or_default();
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_come_first_once_and_in_place() {
        let files: &[LuaFile] = &[
            ("a.lua", "local a = 1\n"),
            ("b.lua", "--- @include \"a.lua\"\nlocal b = a\n"),
            (
                "c.lua",
                "--- @include \"a.lua\"\n--- @include \"b.lua\"\nlocal c = b\n--- @include \"d.lua\"\n",
            ),
            ("d.lua", "--- @include \"b.lua\"\nreturn c\n"),
        ];
        assert_eq!(
            compose(files, "c.lua").unwrap(),
            "local a = 1\nlocal b = a\nlocal c = b\nreturn c\n"
        );
        let order: Vec<_> = pieces(files, "c.lua").unwrap().iter().map(|p| p.file).collect();
        assert_eq!(order, ["a.lua", "b.lua", "c.lua", "d.lua"]);
    }

    #[test]
    fn snippets_are_copied_with_their_arguments() {
        let files: &[LuaFile] = &[
            (
                "pace.lua",
                "--- @snippet r, l\n-- The pace.\nif l > 0 then r = r.x + l .. 'l' end -- l\n",
            ),
            (
                "a.lua",
                "local x\n  --- @inline \"pace.lua\" r=S.r, l=math.max(a, b)\nreturn x\n",
            ),
            ("b.lua", "--- @inline \"pace.lua\" r=x\n"),
            ("c.lua", "--- @inline \"a.lua\" r=x\n"),
        ];
        assert_eq!(
            compose(files, "a.lua").unwrap(),
            "local x\n  if math.max(a, b) > 0 then S.r = S.r.x + math.max(a, b) .. 'l' end -- l\nreturn x\n"
        );
        assert_eq!(
            compose(files, "b.lua").unwrap_err(),
            "b.lua: inlines pace.lua with [\"r\"], but its parameters are [\"l\", \"r\"]"
        );
        assert_eq!(
            compose(files, "c.lua").unwrap_err(),
            "c.lua: inlines a.lua, which is not a snippet"
        );
    }

    #[test]
    fn cycles_unknown_files_and_bad_directives_are_refused() {
        let files: &[LuaFile] = &[
            ("a.lua", "--- @include \"b.lua\"\n"),
            ("b.lua", "--- @include \"c.lua\"\n"),
            ("c.lua", "--- @include \"a.lua\"\n"),
            ("d.lua", "--- @include \"e.lua\"\n"),
            ("f.lua", "--- @include a.lua\n"),
        ];
        assert_eq!(
            compose(files, "a.lua").unwrap_err(),
            "include cycle: a.lua -> b.lua -> c.lua -> a.lua"
        );
        assert_eq!(
            compose(files, "d.lua").unwrap_err(),
            "d.lua includes e.lua, which is not a known file"
        );
        assert!(compose(files, "f.lua").unwrap_err().contains("malformed include"));
        assert_eq!(compose(files, "x.lua").unwrap_err(), "no script x.lua");
    }
}
