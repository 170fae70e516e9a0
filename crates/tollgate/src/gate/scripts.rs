//! The gate's scripts: one entry file in `lua/` per operation (named as
//! its field here), whose `--- @include` lines name the fragments it is
//! made of, in the order they run (store/lua.rs resolves them, once, when
//! the store is made). Each fragment says in its header what it needs of
//! the fragments before it (`--- @needs`) and what it defines for those
//! after it (`--- @defines`); the tests below check every composed script
//! against the headers and the code.

use redis::Script;

use crate::store::lua::{LuaFile, compose};

/// Every Lua file of the gate's scripts, by the name `--- @include` uses.
pub(crate) const FILES: &[LuaFile] = &[
    // The operations' entry files.
    ("enter.lua", include_str!("lua/enter.lua")),
    ("poll.lua", include_str!("lua/poll.lua")),
    ("renew.lua", include_str!("lua/renew.lua")),
    ("leave.lua", include_str!("lua/leave.lua")),
    ("pass_many.lua", include_str!("lua/pass_many.lua")),
    ("set_capacity.lua", include_str!("lua/set_capacity.lua")),
    ("stats.lua", include_str!("lua/stats.lua")),
    ("holders.lua", include_str!("lua/holders.lua")),
    ("line.lua", include_str!("lua/line.lua")),
    ("admin.lua", include_str!("lua/admin.lua")),
    ("set_admission.lua", include_str!("lua/set_admission.lua")),
    ("watch.lua", include_str!("lua/watch.lua")),
    ("draw.lua", include_str!("lua/draw.lua")),
    // What every script starts with, and the functions the paths share.
    ("keys.lua", include_str!("lua/keys.lua")),
    ("meta.lua", include_str!("lua/meta.lua")),
    ("inline.lua", include_str!("lua/inline.lua")),
    ("lone_absorb.lua", include_str!("lua/lone_absorb.lua")),
    // The paths that answer before the general path, in the order they run.
    ("line_write.lua", include_str!("lua/line_write.lua")),
    ("enter_line.lua", include_str!("lua/enter_line.lua")),
    ("leave_line.lua", include_str!("lua/leave_line.lua")),
    ("lone_enter.lua", include_str!("lua/lone_enter.lua")),
    ("lone_leave.lua", include_str!("lua/lone_leave.lua")),
    ("lone_renew.lua", include_str!("lua/lone_renew.lua")),
    ("enter_fast.lua", include_str!("lua/enter_fast.lua")),
    ("leave_fast.lua", include_str!("lua/leave_fast.lua")),
    ("held_fast.lua", include_str!("lua/held_fast.lua")),
    ("pass_on.lua", include_str!("lua/pass_on.lua")),
    // The general path, and leave's body (shared with admin.lua).
    ("general.lua", include_str!("lua/general.lua")),
    ("general_state.lua", include_str!("lua/general_state.lua")),
    ("general_holders.lua", include_str!("lua/general_holders.lua")),
    ("general_line.lua", include_str!("lua/general_line.lua")),
    ("general_expire.lua", include_str!("lua/general_expire.lua")),
    ("general_grant.lua", include_str!("lua/general_grant.lua")),
    ("general_finish.lua", include_str!("lua/general_finish.lua")),
    ("leave_general.lua", include_str!("lua/leave_general.lua")),
    ("line_clear.lua", include_str!("lua/line_clear.lua")),
    // Snippets, copied where they are used (`--- @inline`).
    ("line_pace.lua", include_str!("lua/line_pace.lua")),
    ("line_join.lua", include_str!("lua/line_join.lua")),
];

/// The gate's scripts, one per operation, each composed from its entry
/// file `<field>.lua`.
macro_rules! gate_scripts {
    ($($op:ident),* $(,)?) => {
        pub(crate) struct GateScripts {
            $(pub(crate) $op: Script,)*
        }

        /// The entry file of each script.
        #[cfg(test)]
        const ENTRIES: &[&str] = &[$(concat!(stringify!($op), ".lua")),*];

        impl GateScripts {
            /// Composes every script; `prepare` applies the store's
            /// settings to each text (see `Scripts::new`).
            pub(crate) fn new(prepare: impl Fn(&str) -> Script) -> Self {
                GateScripts {
                    $($op: prepare(&compose(FILES, concat!(stringify!($op), ".lua"))
                        // The files are built in; the tests below compose every one.
                        .expect("the gate's scripts compose")),)*
                }
            }

            pub(crate) fn all(&self) -> impl Iterator<Item = &Script> {
                [$(&self.$op),*].into_iter()
            }
        }
    };
}

gate_scripts!(
    enter,
    poll,
    renew,
    leave,
    pass_many,
    set_capacity,
    stats,
    holders,
    line,
    admin,
    set_admission,
    watch,
    draw,
);

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;
    use crate::store::lua::{INCLUDE, INLINE, pieces};

    const KEYWORDS: &[&str] = &[
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
        "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
    ];

    /// The names a file's `--- @<what>` header lines list.
    fn header(text: &str, what: &str) -> Vec<String> {
        let tag = format!("--- @{what} ");
        text.lines()
            .filter_map(|l| l.strip_prefix(&tag))
            .flat_map(|l| l.split(','))
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// `text` with comments cut and every string emptied (the quotes
    /// kept), so only code is left; lines stay where they were.
    fn code_only(text: &str) -> String {
        let b = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    assert!(
                        !text[i..].starts_with("--[["),
                        "long comments are not read by this check"
                    );
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                }
                q @ (b'\'' | b'"') => {
                    out.push(q as char);
                    i += 1;
                    while i < b.len() && b[i] != q {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    out.push(q as char);
                    i += 1;
                }
                b'[' if matches!(b.get(i + 1), Some(b'[' | b'=')) => {
                    panic!("long strings are not read by this check")
                }
                _ => {
                    let c = text[i..].chars().next().unwrap();
                    out.push(c);
                    i += c.len_utf8();
                }
            }
        }
        out
    }

    fn ident_at(s: &str) -> &str {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        &s[..end]
    }

    /// The file's top-level definitions: `local function NAME`, every
    /// NAME of `local NAME, NAME ... =` (the list may go on past a line
    /// ending in a comma) and `function F.NAME(` at the start of a line.
    fn definitions(code: &str) -> Vec<String> {
        let mut names = Vec::new();
        let mut at = 0;
        for line in code.split_inclusive('\n') {
            let start = at;
            at += line.len();
            if let Some(rest) = line.strip_prefix("local function ") {
                names.push(ident_at(rest).to_string());
            } else if line.starts_with("local ") {
                let mut rest = &code[start + "local ".len()..];
                loop {
                    let name = ident_at(rest);
                    names.push(name.to_string());
                    rest = rest[name.len()..].trim_start();
                    match rest.strip_prefix(',') {
                        Some(more) => rest = more.trim_start(),
                        None => break,
                    }
                }
            } else if let Some(rest) = line.strip_prefix("function ") {
                let name = &rest[..rest.find('(').expect("a function's parameters")];
                names.push(name.to_string());
            }
        }
        names
    }

    /// The names the code reads or assigns: identifiers, except keywords,
    /// fields (`x.name`) and keys in a table constructor (`{name = ...}`),
    /// and `F.name` for each helper of F it names.
    fn uses(code: &str) -> BTreeSet<String> {
        let b = code.as_bytes();
        let mut names = BTreeSet::new();
        let (mut i, mut braces) = (0, 0i32);
        while i < b.len() {
            let c = b[i];
            if c == b'{' {
                braces += 1;
            } else if c == b'}' {
                braces -= 1;
            } else if c.is_ascii_digit() {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                    i += 1;
                }
                continue;
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let name = ident_at(&code[i..]);
                let field = i > 0 && b[i - 1] == b'.' && (i < 2 || b[i - 2] != b'.');
                let after = code[i + name.len()..].trim_start();
                let key = braces > 0 && after.starts_with('=') && !after.starts_with("==");
                if !field && !key && !KEYWORDS.contains(&name) {
                    names.insert(name.to_string());
                    if let Some(rest) = after.strip_prefix('.').filter(|r| !r.starts_with('.')) {
                        names.insert(format!("{name}.{}", ident_at(rest)));
                    }
                }
                i += name.len();
                continue;
            }
            i += 1;
        }
        names
    }

    /// What is wrong with script `entry` (of `files`): each fragment's
    /// needs must be defined by one included before it; no top-level name
    /// may be defined twice; each `--- @defines` name must be defined; a
    /// fragment must name in `--- @needs` every top-level definition of
    /// an earlier fragment it uses, and use every name it needs; a helper
    /// of F must be defined before a fragment names it.
    fn problems(files: &[LuaFile], entry: &str) -> Vec<String> {
        let mut order: Vec<&str> = Vec::new();
        let mut own: HashMap<&str, String> = HashMap::new();
        for p in pieces(files, entry).unwrap_or_else(|e| panic!("{entry}: {e}")) {
            if !own.contains_key(p.file) {
                order.push(p.file);
            }
            own.entry(p.file).or_default().push_str(&p.text);
        }
        let mut out = Vec::new();
        // Top-level definitions and @defines of the fragments so far.
        let mut defined: HashMap<String, &str> = HashMap::new();
        let mut declared: HashMap<String, &str> = HashMap::new();
        for file in order {
            let text = &own[file];
            let code = code_only(text);
            let (needs, defines) = (header(text, "needs"), header(text, "defines"));
            let (defs, used) = (definitions(&code), uses(&code));
            for need in &needs {
                if !declared.contains_key(need) {
                    out.push(format!(
                        "{entry}: {file} needs {need}, which no file before it defines"
                    ));
                }
                if !used.contains(need) {
                    out.push(format!("{entry}: {file} needs {need} but does not use it"));
                }
            }
            for name in &used {
                match defined.get(name) {
                    // (One of its own, defined twice: reported below.)
                    Some(by) if !needs.contains(name) && !defs.contains(name) => out.push(format!(
                        "{entry}: {file} uses {name} (defined by {by}) but does not say it needs it"
                    )),
                    None if name.starts_with("F.") && !defs.contains(name) => out.push(format!(
                        "{entry}: {file} uses {name}, which no file before it defines"
                    )),
                    _ => {}
                }
            }
            for name in &defines {
                if !defs.contains(name) {
                    out.push(format!("{entry}: {file} says it defines {name} but does not"));
                }
                declared.insert(name.clone(), file);
            }
            for name in defs {
                if let Some(before) = defined.insert(name.clone(), file) {
                    out.push(format!(
                        "{entry}: {name} is defined twice: by {before} and {file}"
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn every_script_composes_as_its_headers_say() {
        let all: Vec<String> = ENTRIES.iter().flat_map(|e| problems(FILES, e)).collect();
        assert!(all.is_empty(), "{}", all.join("\n"));
    }

    #[test]
    fn every_file_is_in_some_script_and_watch_stands_alone() {
        let mut unused: BTreeSet<&str> = FILES.iter().map(|(n, _)| *n).collect();
        for entry in ENTRIES {
            for p in pieces(FILES, entry).unwrap() {
                unused.remove(p.file);
            }
        }
        // A snippet is in the scripts of the files that inline it.
        let snippets: Vec<&str> = unused.iter().copied().collect();
        for snippet in snippets {
            let directive = format!("{INLINE}\"{snippet}\"");
            if FILES
                .iter()
                .any(|(by, t)| !unused.contains(by) && t.contains(&directive))
            {
                unused.remove(snippet);
            }
        }
        assert!(unused.is_empty(), "in no script: {unused:?}");
        // The no-writes flag must stay its first line.
        let watch = compose(FILES, "watch.lua").unwrap();
        assert!(watch.starts_with("#!lua flags=no-writes\n"));
        assert!(!watch.contains(INCLUDE));
    }

    #[test]
    fn the_check_finds_broken_declarations() {
        let files: &[LuaFile] = &[
            (
                "a.lua",
                "--- @defines x, f\nlocal x, f = 1, function() end\nlocal private = 2\n",
            ),
            (
                "b.lua",
                "--- @include \"a.lua\"\n--- @needs x, y\nlocal z = x + private\nf()\n",
            ),
            (
                "c.lua",
                "--- @include \"b.lua\"\n--- @defines w\nlocal z = 3\nfunction F.g() return F.h end\n",
            ),
        ];
        assert_eq!(
            problems(files, "c.lua"),
            [
                "c.lua: b.lua needs y, which no file before it defines",
                "c.lua: b.lua needs y but does not use it",
                "c.lua: b.lua uses f (defined by a.lua) but does not say it needs it",
                "c.lua: b.lua uses private (defined by a.lua) but does not say it needs it",
                "c.lua: c.lua uses F.h, which no file before it defines",
                "c.lua: c.lua says it defines w but does not",
                "c.lua: z is defined twice: by b.lua and c.lua",
            ]
        );
    }
}
