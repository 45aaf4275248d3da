//! A source file's references to the crate's modules: a lexer that skips
//! comments and literals, and a parser of `use` trees and paths that
//! resolves `crate`, `super`, `self` and the names a `use` of the crate
//! bound, and skips what `#[cfg(test)]` gates.

use std::collections::HashMap;

/// The module of a file, from its path under `src/`: `a/b.rs` and
/// `a/b/mod.rs` are `a::b`; `lib.rs` is the root; `main.rs` is the binary.
pub(super) fn module_path(relative: &str) -> Vec<String> {
    let without_rs = relative.strip_suffix(".rs").unwrap_or(relative);
    let mut path: Vec<String> = without_rs.split('/').map(str::to_string).collect();
    if path.last().map(String::as_str) == Some("mod") || path == ["lib"] {
        path.pop();
    }
    path
}

// ---------------------------------------------------------------------------
// The lexer: identifiers, `::`, brackets and punctuation, with line numbers.
// Comments, strings (plain, byte, C, raw), characters, lifetimes and numbers
// produce no token.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Open(char),
    Close(char),
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn lex(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let at = |k: usize| chars.get(k).copied().unwrap_or('\0');
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let mut tok = None;
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            i = skip_block_comment(&chars, i);
        } else if c == '"' {
            i = skip_string(&chars, i + 1);
        } else if c == '\'' {
            i = skip_quote(&chars, i);
        } else if c.is_ascii_digit() {
            while is_ident_char(at(i)) || (at(i) == '.' && at(i + 1).is_ascii_digit()) {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            while is_ident_char(at(i)) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
            match word.as_str() {
                "b" | "c" if at(i) == '"' => i = skip_string(&chars, i + 1),
                "b" if at(i) == '\'' => i = skip_quote(&chars, i),
                "r" | "br" | "cr" if at(i + hashes) == '"' => {
                    i = skip_raw_string(&chars, i + hashes + 1, hashes)
                }
                "r" if hashes == 1 && is_ident_char(at(i + 1)) => {
                    // A raw identifier: `r#type`.
                    let from = i + 1;
                    i = from;
                    while is_ident_char(at(i)) {
                        i += 1;
                    }
                    tok = Some(Tok::Ident(chars[from..i].iter().collect()));
                }
                _ => tok = Some(Tok::Ident(word)),
            }
        } else if c == ':' && at(i + 1) == ':' {
            i += 2;
            tok = Some(Tok::PathSep);
        } else {
            i += 1;
            tok = match c {
                '{' | '(' | '[' => Some(Tok::Open(c)),
                '}' | ')' | ']' => Some(Tok::Close(c)),
                c if c.is_whitespace() => None,
                c => Some(Tok::Punct(c)),
            };
        }
        if let Some(tok) = tok {
            tokens.push(Token { tok, line });
        }
        line += chars[start..i].iter().filter(|&&c| c == '\n').count();
    }
    tokens
}

/// From the `/` of `/*` to past the matching `*/`: Rust's block comments nest.
fn skip_block_comment(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1)) {
            ('/', Some('*')) => {
                depth += 1;
                i += 2;
            }
            ('*', Some('/')) => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    i
}

/// From inside a string to past its closing quote.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// From inside a raw string to past its closing quote and `hashes` hashes.
fn skip_raw_string(chars: &[char], mut i: usize, hashes: usize) -> usize {
    while i < chars.len() {
        if chars[i] == '"' && chars[i + 1..].iter().take_while(|&&c| c == '#').count() >= hashes {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// From a `'` past a character literal (`'x'`, `'\''`, `'\u{1F600}'`) or a
/// lifetime or label (`'a`).
fn skip_quote(chars: &[char], i: usize) -> usize {
    let at = |k: usize| chars.get(k).copied().unwrap_or('\0');
    if at(i + 1) == '\\' {
        let mut k = i + 3;
        while k < chars.len() && chars[k] != '\'' {
            k += 1;
        }
        k + 1
    } else if at(i + 2) == '\'' {
        i + 3
    } else {
        let mut k = i + 1;
        while is_ident_char(at(k)) {
            k += 1;
        }
        k
    }
}

// ---------------------------------------------------------------------------
// The parser: a file's references to the crate's modules.

/// One reference: the absolute path it names (from the crate root, without
/// `crate`) and its line.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Ref {
    pub(super) line: usize,
    pub(super) path: Vec<String>,
}

#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub(super) refs: Vec<Ref>,
    /// The `#[cfg(test)] mod x;` declarations, relative to the file's module.
    pub(super) test_modules: Vec<Vec<String>>,
    /// The line of the `#[cfg(test)]` of the file's first test module.
    pub(super) test_cut: Option<usize>,
}

struct Parser<'a> {
    toks: &'a [Token],
    /// The file's module path.
    module: &'a [String],
    /// The inline modules (`mod sys { .. }`) the parser is in, each with
    /// the brace depth of its body.
    inline: Vec<(String, usize)>,
    depth: usize,
    /// Names bound by a `use` of the crate, and the paths they stand for.
    aliases: HashMap<String, Vec<String>>,
    out: Parsed,
}

pub(super) fn parse(src: &str, module: &[String]) -> Parsed {
    let toks = lex(src);
    let mut parser = Parser {
        toks: &toks,
        module,
        inline: Vec::new(),
        depth: 0,
        aliases: HashMap::new(),
        out: Parsed::default(),
    };
    let mut i = 0;
    while i < toks.len() {
        i = parser.step(i);
    }
    parser.out
}

impl Parser<'_> {
    fn tok(&self, i: usize) -> Option<&Tok> {
        self.toks.get(i).map(|t| &t.tok)
    }

    fn ident(&self, i: usize) -> Option<&str> {
        match self.tok(i) {
            Some(Tok::Ident(word)) => Some(word),
            _ => None,
        }
    }

    /// The module the parser is in: the file's and its inline modules.
    fn current(&self) -> Vec<String> {
        let mut path = self.module.to_vec();
        path.extend(self.inline.iter().map(|(name, _)| name.clone()));
        path
    }

    /// Consumes what starts at `i`; returns where the next step starts.
    fn step(&mut self, i: usize) -> usize {
        match self.tok(i) {
            Some(Tok::Punct('#')) => {
                let (end, cfg_test) = self.attribute(i);
                if cfg_test {
                    self.skip_test_item(end, self.toks[i].line)
                } else {
                    end
                }
            }
            Some(Tok::Ident(word)) if word == "use" => self.use_decl(i + 1),
            Some(Tok::Ident(word)) if word == "mod" => {
                if let (Some(name), Some(Tok::Open('{'))) = (self.ident(i + 1), self.tok(i + 2)) {
                    self.inline.push((name.to_string(), self.depth + 1));
                }
                i + 1
            }
            Some(Tok::Open('{')) => {
                self.depth += 1;
                i + 1
            }
            Some(Tok::Close('}')) => {
                if self.inline.last().map(|(_, depth)| *depth) == Some(self.depth) {
                    self.inline.pop();
                }
                self.depth = self.depth.saturating_sub(1);
                i + 1
            }
            Some(Tok::Ident(_)) => self.path(i),
            _ => i + 1,
        }
    }

    /// The attribute at `i` (`#[..]` or `#![..]`): where it ends, and
    /// whether it is an outer `#[cfg(test)]`.
    fn attribute(&self, i: usize) -> (usize, bool) {
        let inner = self.tok(i + 1) == Some(&Tok::Punct('!'));
        let open = if inner { i + 2 } else { i + 1 };
        if self.tok(open) != Some(&Tok::Open('[')) {
            return (i + 1, false);
        }
        let end = self.skip_balanced(open);
        let body: Vec<&Tok> = self.toks[open + 1..end - 1]
            .iter()
            .map(|t| &t.tok)
            .collect();
        let cfg_test = !inner
            && body
                == [
                    &Tok::Ident("cfg".into()),
                    &Tok::Open('('),
                    &Tok::Ident("test".into()),
                    &Tok::Close(')'),
                ];
        (end, cfg_test)
    }

    /// From an opening bracket at `i` to past its closing one.
    fn skip_balanced(&self, mut i: usize) -> usize {
        let mut depth = 0;
        while let Some(tok) = self.tok(i) {
            i += 1;
            match tok {
                Tok::Open(_) => depth += 1,
                Tok::Close(_) => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        i
    }

    /// Skips the item a `#[cfg(test)]` gates, which starts at `i`; records a
    /// test module's file or the line where the file's tests start.
    fn skip_test_item(&mut self, mut i: usize, attr_line: usize) -> usize {
        while self.tok(i) == Some(&Tok::Punct('#')) {
            i = self.attribute(i).0;
        }
        if self.ident(i) == Some("pub") {
            i += 1;
            if self.tok(i) == Some(&Tok::Open('(')) {
                i = self.skip_balanced(i);
            }
        }
        if let (Some("mod"), Some(name)) = (self.ident(i), self.ident(i + 1)) {
            match self.tok(i + 2) {
                Some(Tok::Punct(';')) => {
                    let mut path: Vec<String> =
                        self.inline.iter().map(|(n, _)| n.clone()).collect();
                    path.push(name.to_string());
                    self.out.test_modules.push(path);
                    return i + 3;
                }
                Some(Tok::Open('{')) => {
                    if self.inline.is_empty() && self.out.test_cut.is_none() {
                        self.out.test_cut = Some(attr_line);
                    }
                    return self.skip_balanced(i + 2);
                }
                _ => {}
            }
        }
        // An item ends at its `;` or its body's `}`; a field, a variant or a
        // match arm at its `,` or at the bracket that closes its list.
        let is_use = self.ident(i) == Some("use");
        let mut depth = 0;
        while let Some(tok) = self.tok(i) {
            match tok {
                Tok::Open(_) => depth += 1,
                Tok::Close(_) if depth == 0 => return i,
                Tok::Close(c) => {
                    depth -= 1;
                    if depth == 0 && *c == '}' && !is_use {
                        return i + 1;
                    }
                }
                Tok::Punct(';' | ',') if depth == 0 => return i + 1,
                _ => {}
            }
            i += 1;
        }
        i
    }

    /// A `use` declaration whose tree starts at `i`.
    fn use_decl(&mut self, i: usize) -> usize {
        let mut leaves = Vec::new();
        let mut i = self.use_tree(i, Vec::new(), &mut leaves);
        for (line, path, bound) in leaves {
            if let Some(path) = self.resolve(&path) {
                if let Some(name) = bound.filter(|name| name != "_") {
                    self.aliases.insert(name, path.clone());
                }
                self.out.refs.push(Ref { line, path });
            }
        }
        while let Some(tok) = self.tok(i) {
            i += 1;
            if *tok == Tok::Punct(';') {
                break;
            }
        }
        i
    }

    /// One use tree at `i` under `prefix`: pushes each leaf's line, path and
    /// the name it binds (none for a glob); returns where the tree ends.
    fn use_tree(
        &self,
        mut i: usize,
        mut prefix: Vec<String>,
        leaves: &mut Vec<(usize, Vec<String>, Option<String>)>,
    ) -> usize {
        if prefix.is_empty() && self.tok(i) == Some(&Tok::PathSep) {
            // `use ::name`: an external crate.
            prefix.push("::".into());
            i += 1;
        }
        loop {
            let Some(token) = self.toks.get(i) else {
                return i;
            };
            match &token.tok {
                Tok::Ident(segment) => {
                    prefix.push(segment.clone());
                    i += 1;
                    if self.tok(i) == Some(&Tok::PathSep) {
                        i += 1;
                        continue;
                    }
                    let mut alias = None;
                    if self.ident(i) == Some("as") {
                        alias = self.ident(i + 1).map(str::to_string);
                        i += 2;
                    }
                    if prefix.last().map(String::as_str) == Some("self") {
                        prefix.pop();
                    }
                    let bound = alias.or_else(|| prefix.last().cloned());
                    leaves.push((token.line, prefix, bound));
                    return i;
                }
                Tok::Open('{') => {
                    i += 1;
                    while i < self.toks.len() {
                        match self.tok(i) {
                            Some(Tok::Close('}')) => return i + 1,
                            Some(Tok::Punct(',')) => i += 1,
                            _ => i = self.use_tree(i, prefix.clone(), leaves),
                        }
                    }
                    return i;
                }
                Tok::Punct('*') => {
                    leaves.push((token.line, prefix, None));
                    return i + 1;
                }
                _ => return i + 1,
            }
        }
    }

    /// A path in code starting at the identifier at `i`, if it names the
    /// crate's modules.
    fn path(&mut self, i: usize) -> usize {
        let after_sep_or_dot =
            i > 0 && matches!(self.tok(i - 1), Some(Tok::PathSep) | Some(Tok::Punct('.')));
        if after_sep_or_dot || self.tok(i + 1) != Some(&Tok::PathSep) {
            return i + 1;
        }
        let mut segments = vec![self.ident(i).unwrap_or_default().to_string()];
        let mut k = i + 1;
        while self.tok(k) == Some(&Tok::PathSep) {
            match self.ident(k + 1) {
                Some(segment) => segments.push(segment.to_string()),
                None => break,
            }
            k += 2;
        }
        if let Some(path) = self.resolve(&segments) {
            let line = self.toks[i].line;
            self.out.refs.push(Ref { line, path });
        }
        k
    }

    /// The absolute path a path of this module names, if it is the crate's.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        match first.as_str() {
            "crate" | "csi_agent" => Some(rest.to_vec()),
            "self" => Some([self.current(), rest.to_vec()].concat()),
            "super" => {
                let mut base = self.current();
                let mut rest = segments;
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                Some([base, rest.to_vec()].concat())
            }
            name => self
                .aliases
                .get(name)
                .map(|path| [path.clone(), rest.to_vec()].concat()),
        }
    }
}

// ---------------------------------------------------------------------------
// The parser on small sources, so that it cannot silently see nothing.

fn module(path: &str) -> Vec<String> {
    path.split("::").map(str::to_string).collect()
}

/// The paths a source in module `at` refers to, joined with `::`.
fn refs(src: &str, at: &str) -> Vec<String> {
    parse(src, &module(at))
        .refs
        .into_iter()
        .map(|r| r.path.join("::"))
        .collect()
}

#[test]
fn parser_reads_grouped_uses() {
    let src = "use crate::{a, b::{c, d as e, self}, f::*};\nuse std::io;\n";
    assert_eq!(refs(src, "x"), ["a", "b::c", "b::d", "b", "f"]);
}

#[test]
fn parser_resolves_super_from_the_module_path() {
    assert_eq!(
        module_path("volume/manager/mod.rs"),
        module("volume::manager")
    );
    assert_eq!(
        module_path("volume/manager/claims.rs"),
        module("volume::manager::claims")
    );
    assert_eq!(module_path("lib.rs"), Vec::<String>::new());
    let src = "use super::model::Volume;\nuse super::super::csi::Backoff;\n";
    // `volume/manager/claims.rs`: its parent is `volume::manager`.
    assert_eq!(
        refs(src, "volume::manager::claims"),
        ["volume::manager::model::Volume", "volume::csi::Backoff"]
    );
    // `volume/manager/mod.rs`: its parent is `volume`.
    assert_eq!(
        refs(src, "volume::manager"),
        ["volume::model::Volume", "csi::Backoff"]
    );
    // Inside an inline module, `super` is the file's module.
    let src = "mod sys {\n    use super::super::User;\n}\nuse super::Launch;\n";
    assert_eq!(
        refs(src, "task::exec::child"),
        ["task::exec::User", "task::exec::Launch"]
    );
}

#[test]
fn parser_reads_paths_in_code_and_through_names_a_use_bound() {
    let src = "use crate::proto;\nuse crate::csi::Backoff as B;\nfn f() {\n    \
               let x = crate::a::b::f(); proto::agent::Plugin::new(); B::new();\n    \
               std::proto::x(); self.proto; super::y::z();\n}\n";
    let parsed = parse(src, &module("m::n"));
    let found: Vec<(usize, String)> = parsed
        .refs
        .into_iter()
        .map(|r| (r.line, r.path.join("::")))
        .collect();
    assert_eq!(
        found,
        [
            (1, "proto".to_string()),
            (2, "csi::Backoff".to_string()),
            (4, "a::b::f".to_string()),
            (4, "proto::agent::Plugin::new".to_string()),
            (4, "csi::Backoff::new".to_string()),
            (5, "m::y::z".to_string()),
        ]
    );
}

#[test]
fn parser_ignores_comments_and_literals() {
    let src = r###"// use crate::a;
/* crate::b /* nested */ crate::c */
/// [`crate::d`]
//! crate::e
fn f<'a>(x: &'a str) {
    let s = "crate::f \" crate::g";
    let r = r##"crate::h "# crate::i"##;
    let b = b"crate::j";
    let q = '"';
    let e = '\'';
    crate::k::real();
}
"###;
    let parsed = parse(src, &module("m"));
    assert_eq!(
        parsed.refs,
        [Ref {
            line: 11,
            path: module("k::real")
        }]
    );
}

#[test]
fn parser_skips_what_cfg_test_gates() {
    let src = "use crate::a;\n\
               #[cfg(test)]\nmod answers_tests;\n\
               #[cfg(test)]\npub(crate) fn helper() { crate::b::f() }\n\
               #[cfg(test)]\nuse crate::c::{d, e};\n\
               fn g() { crate::f::h() }\n\
               struct S {\n    #[cfg(test)]\n    t: crate::t::T,\n    u: crate::u::U,\n}\n\
               #[cfg(test)]\n#[allow(unused)]\nmod tests {\n    use crate::i;\n}\n";
    let parsed = parse(src, &module("m"));
    let found: Vec<String> = parsed.refs.iter().map(|r| r.path.join("::")).collect();
    assert_eq!(found, ["a", "f::h", "u::U"]);
    assert_eq!(parsed.test_modules, [module("answers_tests")]);
    assert_eq!(parsed.test_cut, Some(14));
}
