#!/usr/bin/env python3
"""Tests of scripts/check-cycles on tiny crates written to a temp dir.
Run: python3 scripts/check_cycles_test.py (scripts/test does)."""
import importlib.machinery
import importlib.util
import io
import os
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("check_cycles", os.path.join(HERE, "check-cycles"))
_spec = importlib.util.spec_from_loader("check_cycles", _loader)
cc = importlib.util.module_from_spec(_spec)
_loader.exec_module(cc)

SRC = "crates/demo/src"


class Repo:
    """A repository with one crate, crates/demo, made of {path: text}."""

    def __init__(self, files, root="lib.rs"):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = self.tmp.name
        for rel, text in files.items():
            self.write(rel, text)
        self.root = os.path.join(self.path, SRC, root)

    def write(self, rel, text):
        full = os.path.join(self.path, SRC, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text).lstrip("\n"))

    def edges(self):
        crate = cc.Crate(self.root, self.path)
        return crate, {(short(a), short(b)): v for (a, b), v in cc.crate_edges(crate).items()}

    def cycles(self):
        crate, _ = self.edges()
        return [[short(f) for f in scc] for scc in cc.tarjan(crate.files, cc.crate_edges(crate))]

    def run(self, allow=None, cycles=True, sizes=True):
        out = io.StringIO()
        allow_path = None
        if allow is not None:
            allow_path = os.path.join(self.path, "allow.txt")
            with open(allow_path, "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(allow))
        code = cc.run(self.path, cycles, sizes, allow_path, False, out)
        return code, out.getvalue()

    def close(self):
        self.tmp.cleanup()


def short(path):
    return os.path.relpath(path, SRC)


class CheckCycles(unittest.TestCase):
    def repo(self, files, root="lib.rs"):
        repo = Repo(files, root)
        self.addCleanup(repo.close)
        return repo

    def test_two_cycle_through_use_super(self):
        repo = self.repo({
            "lib.rs": "mod m;\n",
            "m/mod.rs": """
                mod child;
                pub struct X;
                pub fn make() -> X { child::build() }
            """,
            "m/child.rs": """
                use super::X;
                pub fn build() -> X { X }
            """,
        })
        self.assertEqual(repo.cycles(), [["m/child.rs", "m/mod.rs"]])
        code, out = repo.run(sizes=False)
        self.assertEqual(code, 1)
        self.assertIn("import cycle of 2 files", out)
        # Each edge with the line that makes it.
        self.assertIn("m/child.rs -> m/mod.rs: crates/demo/src/m/child.rs:1: use super::X;", out)
        self.assertIn("m/mod.rs -> m/child.rs: crates/demo/src/m/mod.rs:3: pub fn make() -> X { child::build() }", out)

    def test_cycle_through_inline_crate_path(self):
        repo = self.repo({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": """
                pub fn f() -> u8 {
                    crate::b::g() + 1
                }
            """,
            "b.rs": """
                // crate::a::f() in a comment, and in a string, names nothing:
                const NOTE: &str = "crate::a::f()";
                pub fn g() -> u8 {
                    if false { return crate::a::f(); }
                    0
                }
            """,
        })
        crate, edges = repo.edges()
        self.assertEqual(set(edges), {("a.rs", "b.rs"), ("b.rs", "a.rs")})
        self.assertEqual(edges[("b.rs", "a.rs")], (4, "if false { return crate::a::f(); }"))
        self.assertEqual(repo.cycles(), [["a.rs", "b.rs"]])

    def test_reexport_is_pass_through(self):
        # mod.rs re-exports its children's items; a child uses its sibling's
        # item through that re-export: an edge to the sibling, none to
        # mod.rs, and the re-export is no edge of mod.rs.
        repo = self.repo({
            "lib.rs": "mod m;\npub use m::{A, B};\n",
            "m/mod.rs": """
                mod a;
                mod b;
                pub use a::A;
                pub(crate) use self::b::B;
            """,
            "m/a.rs": """
                use super::B;
                pub struct A(pub B);
            """,
            "m/b.rs": """
                pub struct B;
                impl B {
                    pub fn a(self) -> super::A { super::A(self) }
                }
            """,
        })
        _, edges = repo.edges()
        self.assertEqual(set(edges), {("m/a.rs", "m/b.rs"), ("m/b.rs", "m/a.rs")})
        self.assertEqual(repo.cycles(), [["m/a.rs", "m/b.rs"]])
        # Without b's use of A there is no cycle at all.
        repo.write("m/b.rs", "pub struct B;\n")
        self.assertEqual(repo.cycles(), [])
        _, edges = repo.edges()
        self.assertEqual(set(edges), {("m/a.rs", "m/b.rs")})

    def test_reexport_used_by_its_own_module_is_an_edge(self):
        repo = self.repo({
            "lib.rs": "mod m;\n",
            "m/mod.rs": """
                mod a;
                pub use a::A;
                pub fn first() -> A { A }
            """,
            "m/a.rs": "pub struct A;\n",
        })
        _, edges = repo.edges()
        self.assertEqual(edges, {("m/mod.rs", "m/a.rs"): (2, "pub use a::A;")})

    def test_glob(self):
        # `use super::*` brings in mod.rs's items and, through its
        # re-export, d.rs's D: edges to the files of the names c.rs uses,
        # none for those it does not use (other.rs's O).
        repo = self.repo({
            "lib.rs": "mod m;\nmod other;\n",
            "other.rs": "pub struct O;\n",
            "m/mod.rs": """
                mod c;
                mod d;
                pub use d::D;
                use crate::other::O;
                pub fn helper() -> u8 { 1 }
                pub fn run() -> u8 { c::f() }
                pub fn o() -> O { O }
            """,
            "m/c.rs": """
                use super::*;
                pub fn f() -> u8 { let _d = D; helper() }
            """,
            "m/d.rs": "pub struct D;\n",
        })
        _, edges = repo.edges()
        self.assertEqual(set(edges), {
            ("m/mod.rs", "m/c.rs"), ("m/mod.rs", "other.rs"), ("m/c.rs", "m/mod.rs"), ("m/c.rs", "m/d.rs"),
        })
        self.assertEqual(edges[("m/c.rs", "m/d.rs")], (1, "use super::*;"))
        self.assertEqual(repo.cycles(), [["m/c.rs", "m/mod.rs"]])

    def test_enum_glob(self):
        repo = self.repo({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub enum Code { One, Two }\n",
            "b.rs": """
                pub fn is_one(c: crate::a::Code) -> bool {
                    use crate::a::Code::*;
                    matches!(c, One)
                }
            """,
        })
        _, edges = repo.edges()
        self.assertEqual(set(edges), {("b.rs", "a.rs")})

    def test_cfg_test_items_are_ignored(self):
        repo = self.repo({
            "lib.rs": "mod a;\nmod b;\nmod c;\n#[cfg(test)]\nmod only_tests;\n",
            "c.rs": "pub fn h() -> u8 { 0 }\n",
            "a.rs": """
                pub fn f() -> u8 { crate::b::g() }

                pub struct S;
                impl S {
                    #[cfg(test)]
                    fn probe(&self) -> u8 { crate::c::h() }
                }

                #[cfg(test)]
                mod tests {
                    use crate::b::g;
                    #[test]
                    fn it() { assert_eq!(g(), 0); }
                }
            """,
            "b.rs": """
                pub fn g() -> u8 { 0 }

                #[cfg(test)]
                mod tests {
                    use super::*;
                    #[test]
                    fn back() { assert_eq!(crate::a::f(), 0); }
                }
            """,
            "only_tests.rs": "pub fn h() -> u8 { crate::a::f() }\n",
        })
        crate, edges = repo.edges()
        self.assertEqual(set(edges), {("a.rs", "b.rs")})
        self.assertNotIn(os.path.join(SRC, "only_tests.rs"), crate.files)
        self.assertEqual(repo.cycles(), [])

    def test_module_alias_and_mod_declaration(self):
        # `mod x;` is no edge; `use crate::store::memory;` alone is none
        # either: its later `memory::Core` is.
        repo = self.repo({
            "lib.rs": "mod store;\nmod user;\n",
            "store/mod.rs": "pub(crate) mod memory;\n",
            "store/memory.rs": "pub struct Core;\n",
            "user.rs": """
                use crate::store::memory;
                pub fn make() -> memory::Core {
                    memory::Core
                }
            """,
        })
        _, edges = repo.edges()
        self.assertEqual(edges, {("user.rs", "store/memory.rs"): (2, "pub fn make() -> memory::Core {")})

    def test_item_made_by_a_macro(self):
        # An item no module defines (a macro made it) names the file of
        # the last module the path reached.
        repo = self.repo({
            "lib.rs": "mod gen;\nmod user;\n",
            "gen.rs": "macro_rules! make { () => { pub fn made() {} } }\nmake!();\n",
            "user.rs": "pub fn f() { crate::gen::made() }\n",
        })
        _, edges = repo.edges()
        self.assertEqual(set(edges), {("user.rs", "gen.rs")})

    def test_other_crates_are_no_edges(self):
        # The server names the library by its crate name: another crate.
        repo = self.repo({
            "main.rs": """
                mod api;
                mod tollgate { pub struct Local; }
                fn main() {
                    let _ = std::time::Duration::from_secs(1);
                    let _ = ::tollgate::Store::memory();
                    api::serve();
                }
            """,
            "api.rs": """
                use tollgate::Store;
                use serde::Serialize;
                pub fn serve() { let _ = 'label: loop { break 'label b'x'; }; }
                pub fn local() -> crate::tollgate::Local { crate::tollgate::Local }
            """,
        }, root="main.rs")
        _, edges = repo.edges()
        # api.rs's `tollgate::Store` is the external crate (api.rs has no
        # `tollgate` in scope); crate::tollgate is main.rs's inline module.
        self.assertEqual(set(edges), {("main.rs", "api.rs"), ("api.rs", "main.rs")})

    def test_path_attribute(self):
        repo = self.repo({
            "lib.rs": '#[path = "elsewhere/thing.rs"]\nmod thing;\npub fn f() -> u8 { thing::g() }\n',
            "elsewhere/thing.rs": "pub fn g() -> u8 { 2 }\n",
        })
        _, edges = repo.edges()
        self.assertEqual(set(edges), {("lib.rs", "elsewhere/thing.rs")})

    def test_sizes_count_code_not_tests(self):
        body = "".join(f"pub fn f{i}() {{}}\n" for i in range(790))
        tests = "#[cfg(test)]\nmod tests {\n" + "".join(f"    fn t{i}() {{}}\n" for i in range(100)) + "}\n"
        repo = self.repo({"lib.rs": "mod big;\n", "big.rs": body + tests, "x.lua": "return 1\n" * 801})
        code, out = repo.run(cycles=False)
        self.assertEqual(code, 1)
        self.assertIn(f"{SRC}/x.lua has 801 lines", out)
        self.assertNotIn("big.rs", out)
        repo.write("big.rs", body + "pub fn more() {}\n" * 11 + tests)
        code, out = repo.run(cycles=False)
        self.assertIn(f"{SRC}/big.rs has 801 lines", out)

    def test_allowlist(self):
        files = {
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "pub fn f() { crate::b::g() }\n",
            "b.rs": "pub fn g() { crate::a::f() }\n",
            "c.rs": "pub fn h() {}\n",
        }
        repo = self.repo(files)
        ab = f"cycle {SRC}/b.rs {SRC}/a.rs  # issue 37: to remove\n"
        code, out = repo.run(allow=ab)
        self.assertEqual(code, 0, out)
        self.assertIn("allowed", out)
        # A cycle not listed fails.
        code, out = repo.run(allow="")
        self.assertEqual(code, 1)
        self.assertIn("import cycle of 2 files", out)
        # A listed cycle that is gone, or a listed size that is fine, fails
        # as stale.
        code, out = repo.run(allow=ab + f"size {SRC}/c.rs  # issue 37: to remove\n")
        self.assertEqual(code, 1)
        self.assertIn(f"stale allowlist entry, remove it ({repo.path}/allow.txt:2): {SRC}/c.rs", out)
        repo.write("b.rs", "pub fn g() {}\n")
        code, out = repo.run(allow=ab)
        self.assertEqual(code, 1)
        self.assertIn("stale allowlist entry, remove it", out)
        self.assertIn("no import cycles in 4 files (1 edges)", out)
        # A new cycle beside an allowed one fails, and so does an entry
        # without its reason.
        repo.write("b.rs", "pub fn g() { crate::a::f() }\n")
        repo.write("c.rs", "pub fn h() { crate::lib_fn() }\n")
        repo.write("lib.rs", "mod a;\nmod b;\nmod c;\npub fn lib_fn() { c::h() }\n")
        code, out = repo.run(allow=ab)
        self.assertEqual(code, 1)
        self.assertIn(f"import cycle of 2 files in {SRC}:\n  {SRC}/c.rs\n  {SRC}/lib.rs", out)
        code, out = repo.run(allow=ab.split("#")[0] + "\n" + f"cycle {SRC}/c.rs {SRC}/lib.rs  # issue 37\n")
        self.assertEqual(code, 1)
        self.assertIn("needs a comment", out)

    def test_tokens(self):
        toks = cc.tokenize('let s = r#"a "quoted" crate::x"#; let c = \'"\'; /* a /* nested */ b */ x::y')
        self.assertEqual([t.val for t in toks if t.kind == "id"], ["let", "s", "let", "c", "x", "y"])
        self.assertEqual(toks[3].val, 'a "quoted" crate::x')


if __name__ == "__main__":
    unittest.main()
