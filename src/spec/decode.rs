//! The strict decoder: typed getters over the HCL syntax tree that record
//! which keys a block knows, and report everything else.
//!
//! Each block is decoded through a [`Fields`]: every getter registers its key
//! as known, checks the type of the value and reports a mismatch as an error
//! at the value's `file:line:col`. [`Fields::finish`] then reports every item
//! of the block that no getter asked for, with the nearest known name as a
//! suggestion. Errors and warnings are collected in the [`Decoder`] rather
//! than returned one by one, so that a file with five mistakes shows all
//! five; a getter whose value is wrong returns `None` and decoding goes on.
//!
//! Files named `*.json` are parsed in HCL's JSON syntax, whose bodies hold
//! only attributes (properties). The getters read them by HCL's JSON rules:
//! a block getter reads the property of that name as blocks
//! ([`Attribute::json_blocks`]), every other getter as an attribute, so the
//! same decoders, with the same strictness and messages, serve both
//! syntaxes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::hcl::{self, Attribute, Block, Body, Expr, Item, Pos, Span, Syntax};

use super::encode::kept_text;
use super::suggest::nearest;
use super::{Decoded, Invalid, Kept, Warning};

/// The collected errors and warnings of one file, and its source text (to
/// keep ignored items as written).
pub(crate) struct Decoder<'a> {
    file: &'a str,
    src: &'a str,
    errors: RefCell<Vec<hcl::Error>>,
    warnings: RefCell<Vec<Warning>>,
}

impl<'a> Decoder<'a> {
    /// Parses `src` in the syntax its file name says and decodes its body
    /// with `decode`. A syntax error stops there; decoding errors are all
    /// collected.
    pub(crate) fn run<T>(
        src: &'a str,
        file: &'a str,
        decode: impl FnOnce(&Decoder<'_>, &Body) -> T,
    ) -> Result<Decoded<T>, Invalid> {
        let body = hcl::parse_file(src, file).map_err(|err| Invalid {
            errors: vec![err],
            warnings: Vec::new(),
        })?;
        let decoder = Decoder {
            file,
            src,
            errors: RefCell::new(Vec::new()),
            warnings: RefCell::new(Vec::new()),
        };
        let spec = decode(&decoder, &body);
        decoder.finish(spec)
    }

    fn finish<T>(self, spec: T) -> Result<Decoded<T>, Invalid> {
        let mut errors = self.errors.into_inner();
        let mut warnings = self.warnings.into_inner();
        // A rule may look at a value that a getter already reported; say
        // each thing once.
        let mut seen = std::collections::HashSet::new();
        errors.retain(|err| seen.insert((err.pos, err.message.clone())));
        // Blocks report their unknown keys when they end, so sort the
        // messages back into reading order.
        errors.sort_by_key(|err| err.pos);
        warnings.sort_by_key(|warning| warning.pos);
        if errors.is_empty() {
            Ok(Decoded { spec, warnings })
        } else {
            Err(Invalid { errors, warnings })
        }
    }

    /// Records an error at `pos`.
    pub(crate) fn error(&self, pos: Pos, message: impl Into<String>) {
        self.errors
            .borrow_mut()
            .push(hcl::Error::new(self.file, pos, message));
    }

    /// Records a warning at `pos`.
    pub(crate) fn warn(&self, pos: Pos, message: impl Into<String>) {
        self.warnings.borrow_mut().push(Warning {
            file: self.file.to_string(),
            pos,
            message: message.into(),
        });
    }

    /// Starts decoding the top level of the file, described as `what` in
    /// messages (`the volume spec`).
    pub(crate) fn top<'d>(&'d self, body: &'d Body, what: &str) -> Fields<'d> {
        Fields {
            dec: self,
            body,
            what: what.to_string(),
            anchor: what.to_string(),
            pos: Pos::new(1, 1),
            known: Vec::new(),
        }
    }

    /// Checks an ID that becomes a path component; `what` names it.
    pub(crate) fn check_id(&self, pos: Pos, what: &str, id: &str) -> bool {
        match crate::id::validate(what, id) {
            Ok(()) => true,
            Err(err) => {
                self.error(pos, err.to_string());
                false
            }
        }
    }

    /// The source text of `span`, as written.
    fn text(&self, span: Span) -> String {
        let start = byte_offset(self.src, span.start);
        let end = byte_offset(self.src, span.end);
        self.src.get(start..end).unwrap_or_default().to_string()
    }
}

/// The byte offset of a line and character column in `src`, clamped to its
/// length.
fn byte_offset(src: &str, pos: Pos) -> usize {
    let mut line_start = 0;
    for _ in 1..pos.line {
        match src[line_start..].find('\n') {
            Some(at) => line_start += at + 1,
            None => return src.len(),
        }
    }
    src[line_start..]
        .char_indices()
        .nth(pos.col.saturating_sub(1))
        .map_or(src.len(), |(at, _)| line_start + at)
}

/// One `key = "value"` of a map, with where each side is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapEntry {
    pub(crate) key: String,
    pub(crate) key_pos: Pos,
    pub(crate) value: String,
    pub(crate) value_pos: Pos,
}

/// The items of one block being decoded, and the keys asked for so far.
pub(crate) struct Fields<'d> {
    dec: &'d Decoder<'d>,
    body: &'d Body,
    /// The block in messages: `volume "data"`, `restart in group "g"`.
    what: String,
    /// The nearest labeled block (or the file), which nested unlabeled
    /// blocks name in their own description.
    anchor: String,
    /// Where the block starts, for "missing attribute" errors.
    pos: Pos,
    known: Vec<&'static str>,
}

impl<'d> Fields<'d> {
    /// The decoder, for errors that concern more than one field.
    pub(crate) fn dec(&self) -> &'d Decoder<'d> {
        self.dec
    }

    /// How messages name this block.
    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// Where this block starts.
    pub(crate) fn pos(&self) -> Pos {
        self.pos
    }

    /// Records an error at `pos`.
    pub(crate) fn error(&self, pos: Pos, message: impl Into<String>) {
        self.dec.error(pos, message);
    }

    /// Starts decoding a nested block that has no label.
    pub(crate) fn nested(&self, block: &'d Block) -> Fields<'d> {
        Fields {
            dec: self.dec,
            body: &block.body,
            what: format!("{} in {}", block.kind.name, self.anchor),
            anchor: self.anchor.clone(),
            pos: block.kind.span.start,
            known: Vec::new(),
        }
    }

    /// Starts decoding a nested block with one label, or a block that is
    /// named by one of its attributes.
    pub(crate) fn labeled(&self, block: &'d Block, name: &str) -> Fields<'d> {
        let what = format!("{} {name:?}", block.kind.name);
        Fields {
            dec: self.dec,
            body: &block.body,
            what: what.clone(),
            anchor: what,
            pos: block.kind.span.start,
            known: Vec::new(),
        }
    }

    /// Registers `key` and returns its attribute, unless it is missing or
    /// `null`. A block of that name is an error.
    pub(crate) fn attr(&mut self, key: &'static str) -> Option<&'d Attribute> {
        self.known.push(key);
        for block in self.body.blocks_named(key) {
            self.error(
                block.kind.span.start,
                format!(
                    "{key:?} in {} is an attribute, not a block: write {key} = ...",
                    self.what
                ),
            );
        }
        self.body
            .attribute(key)
            .filter(|attr| !attr.value.is_null())
    }

    /// A type error for the value of `attr`.
    fn expected(&self, attr: &Attribute, expected: &str) {
        self.error(
            attr.value.pos(),
            format!(
                "{:?} in {} must be {expected}, found {}",
                attr.key.name,
                self.what,
                article(attr.value.kind_name())
            ),
        );
    }

    /// A string attribute.
    pub(crate) fn string(&mut self, key: &'static str) -> Option<String> {
        self.string_at(key).map(|(value, _)| value)
    }

    /// Whether `key` is present: as an attribute that is not `null`, or as
    /// a block (a map may be either).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.body.attribute(key).is_some_and(|a| !a.value.is_null())
            || self.body.blocks_named(key).next().is_some()
    }

    /// Reports `key` as missing unless it is present; returns `value`.
    pub(crate) fn require<T>(&mut self, key: &'static str, value: Option<T>) -> Option<T> {
        self.known.push(key);
        if !self.has(key) {
            self.missing(key);
        }
        value
    }

    /// Reports the block `kind` as missing unless it is present; returns
    /// `block`.
    pub(crate) fn require_block(&self, kind: &str, block: Option<&'d Block>) -> Option<&'d Block> {
        if block.is_none() {
            self.error(
                self.pos,
                format!("missing required block {kind:?} in {}", self.what),
            );
        }
        block
    }

    /// Reports that the attribute `key` is missing.
    pub(crate) fn missing(&self, key: &str) {
        self.error(self.pos, self.missing_message(key));
    }

    fn missing_message(&self, key: &str) -> String {
        format!("missing required attribute {key:?} in {}", self.what)
    }

    /// A string attribute with the position of its value.
    pub(crate) fn string_at(&mut self, key: &'static str) -> Option<(String, Pos)> {
        let attr = self.attr(key)?;
        match attr.value.as_str() {
            Some(text) => Some((text.to_string(), attr.value.pos())),
            None => {
                self.expected(attr, "a string");
                None
            }
        }
    }

    /// A string attribute parsed with `FromStr`; the parse error is the
    /// message.
    pub(crate) fn parsed<T>(&mut self, key: &'static str) -> Option<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        self.parsed_at(key).map(|(value, _)| value)
    }

    /// Like [`Fields::parsed`], with the position of the value.
    pub(crate) fn parsed_at<T>(&mut self, key: &'static str) -> Option<(T, Pos)>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let (text, pos) = self.string_at(key)?;
        match text.parse() {
            Ok(value) => Some((value, pos)),
            Err(err) => {
                self.error(pos, format!("{key:?} in {}: {err}", self.what));
                None
            }
        }
    }

    /// A boolean attribute.
    pub(crate) fn bool(&mut self, key: &'static str) -> Option<bool> {
        let attr = self.attr(key)?;
        let value = attr.value.as_bool();
        if value.is_none() {
            self.expected(attr, "true or false");
        }
        value
    }

    /// A whole, non-negative number.
    pub(crate) fn u64(&mut self, key: &'static str) -> Option<u64> {
        let attr = self.attr(key)?;
        match attr.value.as_number() {
            Some(number) => {
                let value = number.as_u64();
                if value.is_none() {
                    self.error(
                        attr.value.pos(),
                        format!(
                            "{key:?} in {} must be a whole number of at least 0, found {}",
                            self.what,
                            number.text()
                        ),
                    );
                }
                value
            }
            None => {
                self.expected(attr, "a number");
                None
            }
        }
    }

    /// A TCP port number, 1 to 65535.
    pub(crate) fn port_number(&mut self, key: &'static str) -> Option<u16> {
        let pos = self.attr(key)?.value.pos();
        let value = self.u64(key)?;
        match u16::try_from(value) {
            Ok(port) if port > 0 => Some(port),
            _ => {
                self.error(
                    pos,
                    format!(
                        "{key:?} in {} must be a port from 1 to 65535, found {value}",
                        self.what
                    ),
                );
                None
            }
        }
    }

    /// A duration written as a string, such as `"30s"` or `"1h30m"`.
    pub(crate) fn duration(&mut self, key: &'static str) -> Option<Duration> {
        let (text, pos) = self.string_at(key)?;
        match crate::units::parse_duration(&text) {
            Ok(value) => Some(value),
            Err(err) => {
                self.error(pos, format!("{key:?} in {}: {err}", self.what));
                None
            }
        }
    }

    /// A list of strings.
    pub(crate) fn strings(&mut self, key: &'static str) -> Option<Vec<String>> {
        let attr = self.attr(key)?;
        let Some(items) = attr.value.as_list() else {
            self.expected(attr, "a list of strings");
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item.as_str() {
                Some(text) => out.push(text.to_string()),
                None => self.error(
                    item.pos(),
                    format!(
                        "{:?} in {} must be a list of strings, found {} in the list",
                        attr.key.name,
                        self.what,
                        article(item.kind_name())
                    ),
                ),
            }
        }
        (out.len() == items.len()).then_some(out)
    }

    /// A map of strings, written either as a block (`env { A = "1" }`) or
    /// as an attribute holding an object (`env = { "a.b" = "1" }`), the form
    /// for keys that are not identifiers. Numbers and booleans become their
    /// text, as in HCL's `map(string)`.
    pub(crate) fn map(&mut self, key: &'static str) -> Option<BTreeMap<String, String>> {
        let entries = self.map_entries(key)?;
        Some(
            entries
                .into_iter()
                .map(|entry| (entry.key, entry.value))
                .collect(),
        )
    }

    /// Like [`Fields::map`], with each entry's positions, in source order.
    pub(crate) fn map_entries(&mut self, key: &'static str) -> Option<Vec<MapEntry>> {
        self.known.push(key);
        let mut blocks = self.body.blocks_named(key);
        let attr = self.body.attribute(key).filter(|a| !a.value.is_null());
        let mut entries: Vec<(&str, Pos, &Expr)> = Vec::new();
        let found = match (blocks.next(), attr) {
            (None, None) => return None,
            (Some(block), _) => {
                if self.no_labels(block) {
                    for item in &block.body.items {
                        match item {
                            Item::Attribute(a) => {
                                entries.push((&a.key.name, a.key.span.start, &a.value))
                            }
                            Item::Block(inner) => self.error(
                                inner.kind.span.start,
                                format!(
                                    "{key} in {} holds only key = value lines, found block {:?}",
                                    self.what, inner.kind.name
                                ),
                            ),
                        }
                    }
                }
                if let Some(attr) = attr {
                    self.error(
                        attr.key.span.start,
                        format!("{key:?} in {} is also set as a block", self.what),
                    );
                }
                for extra in blocks {
                    self.twice(key, extra, block);
                }
                true
            }
            (None, Some(attr)) => match attr.value.as_object() {
                Some(object) => {
                    for (k, v) in object {
                        entries.push((&k.name, k.span.start, v));
                    }
                    true
                }
                None => {
                    let expected = match self.body.syntax {
                        Syntax::Native => "an object or a block",
                        Syntax::Json => "an object",
                    };
                    self.expected(attr, expected);
                    false
                }
            },
        };
        let mut map: Vec<MapEntry> = Vec::new();
        for (name, pos, value) in entries {
            let text = match value {
                Expr::String { value, .. } | Expr::Heredoc { value, .. } => value.clone(),
                Expr::Number { value, .. } => value.text().to_string(),
                Expr::Bool { value, .. } => value.to_string(),
                other => {
                    self.error(
                        other.pos(),
                        format!(
                            "{name:?} in {key} in {} must be a string, found {}",
                            self.what,
                            article(other.kind_name())
                        ),
                    );
                    continue;
                }
            };
            if map.iter().any(|entry| entry.key == name) {
                self.error(
                    pos,
                    format!("{name:?} is set twice in {key} in {}", self.what),
                );
                continue;
            }
            map.push(MapEntry {
                key: name.to_string(),
                key_pos: pos,
                value: text,
                value_pos: value.pos(),
            });
        }
        found.then_some(map)
    }

    /// Every block of this kind, which take no labels. An attribute of that
    /// name is an error (in JSON, the property of that name is read as
    /// blocks).
    pub(crate) fn blocks(&mut self, kind: &'static str) -> Vec<&'d Block> {
        self.register_block(kind, "");
        if self.body.syntax == Syntax::Json {
            return self.json_blocks(kind, false);
        }
        self.body
            .blocks_named(kind)
            .filter(|block| self.no_labels(block))
            .collect()
    }

    /// The property `kind` of a JSON body read as blocks, with one label
    /// each when `labeled`; values without a block's shape are errors.
    fn json_blocks(&self, kind: &str, labeled: bool) -> Vec<&'d Block> {
        let Some(attr) = self.body.attribute(kind) else {
            return Vec::new();
        };
        let read = attr.json_blocks(labeled);
        for misshapen in &read.misshapen {
            self.error(
                misshapen.pos,
                format!("{kind:?} in {} {}", self.what, misshapen.message),
            );
        }
        read.blocks.iter().collect()
    }

    /// The block of this kind, which may be given at most once.
    pub(crate) fn block(&mut self, kind: &'static str) -> Option<&'d Block> {
        let blocks = self.blocks(kind);
        let first = *blocks.first()?;
        for extra in &blocks[1..] {
            self.twice(kind, extra, first);
        }
        Some(first)
    }

    /// Registers the block kind `kind`; an attribute of that name is an
    /// error that shows how to write the block, with `labels` after its
    /// kind.
    fn register_block(&mut self, kind: &'static str, labels: &str) {
        self.known.push(kind);
        if self.body.syntax == Syntax::Json {
            // In JSON a block is written as a property: see `json_blocks`.
            return;
        }
        if let Some(attr) = self.body.attribute(kind) {
            self.error(
                attr.key.span.start,
                format!(
                    "{kind:?} in {} is a block, not an attribute: write {kind}{labels} {{ ... }}",
                    self.what
                ),
            );
        }
    }

    fn twice(&self, kind: &str, extra: &Block, first: &Block) {
        self.error(
            extra.kind.span.start,
            format!(
                "{kind} is given twice in {} (first at {})",
                self.what, first.kind.span.start
            ),
        );
    }

    /// Every block of this kind with its one label, the block's name (in
    /// JSON, the keys of the property's object). Names must be unique.
    pub(crate) fn labeled_blocks(&mut self, kind: &'static str) -> Vec<(&'d Block, String)> {
        self.named_blocks(kind, true)
    }

    /// Every block of this kind with its one label, for blocks whose names
    /// may repeat (several `plugin` blocks of one ID): the caller judges
    /// which repeats are allowed.
    pub(crate) fn repeated_labeled_blocks(
        &mut self,
        kind: &'static str,
    ) -> Vec<(&'d Block, String)> {
        self.named_blocks(kind, false)
    }

    fn named_blocks(&mut self, kind: &'static str, unique: bool) -> Vec<(&'d Block, String)> {
        self.register_block(kind, " \"NAME\"");
        let mut seen: BTreeMap<String, Pos> = BTreeMap::new();
        let mut out = Vec::new();
        let blocks: Vec<&'d Block> = match self.body.syntax {
            Syntax::Native => self.body.blocks_named(kind).collect(),
            Syntax::Json => self.json_blocks(kind, true),
        };
        for block in blocks {
            let [label] = block.labels.as_slice() else {
                self.error(
                    block.kind.span.start,
                    format!(
                        "{kind} needs one label, its name ({kind} \"NAME\" {{ ... }}), found {}",
                        block.labels.len()
                    ),
                );
                continue;
            };
            if let Some(first) = seen.get(&label.value).filter(|_| unique) {
                self.error(
                    label.span.start,
                    format!(
                        "{kind} {:?} is declared twice in {} (first at {first})",
                        label.value, self.what
                    ),
                );
                continue;
            }
            seen.insert(label.value.clone(), label.span.start);
            out.push((block, label.value.clone()));
        }
        out
    }

    /// Checks that `block` has no labels.
    fn no_labels(&self, block: &Block) -> bool {
        match block.labels.first() {
            None => true,
            Some(label) => {
                self.error(
                    label.span.start,
                    format!("{} in {} takes no label", block.kind.name, self.what),
                );
                false
            }
        }
    }

    /// Registers Nomad's keys that csi-agent accepts but does not act on:
    /// each one present gets a warning and is kept as written.
    pub(crate) fn ignore(&mut self, keys: &[&'static str]) -> Vec<Kept> {
        self.known.extend_from_slice(keys);
        self.keep(keys, |fields, item, name| {
            fields.dec.warn(
                item.span().start,
                format!("{name:?} in {} is ignored by csi-agent", fields.what),
            );
        })
    }

    /// Registers `keys` and keeps their items as written without a
    /// warning: the caller reports them its own way.
    pub(crate) fn keep_silently(&mut self, keys: &[&'static str]) -> Vec<Kept> {
        self.known.extend_from_slice(keys);
        self.keep(keys, |_, _, _| {})
    }

    fn keep(&self, keys: &[&'static str], mut report: impl FnMut(&Self, &Item, &str)) -> Vec<Kept> {
        let mut kept = Vec::new();
        for item in &self.body.items {
            let name = item_name(item);
            if keys.contains(&name) {
                report(self, item, name);
                // JSON is kept as the HCL it stands for, so that `to_hcl`
                // writes one syntax.
                let text = match item {
                    Item::Attribute(attr) if self.body.syntax == Syntax::Json => {
                        kept_text(&attr.key.name, &attr.value)
                    }
                    _ => self.dec.text(item.span()),
                };
                kept.push(Kept {
                    name: name.to_string(),
                    text,
                });
            }
        }
        kept
    }

    /// Reports every item that no getter asked for.
    pub(crate) fn finish(&self) {
        for item in &self.body.items {
            let name = item_name(item);
            if self.known.contains(&name) {
                continue;
            }
            let what = match (item, self.body.syntax) {
                (_, Syntax::Json) => "key",
                (Item::Attribute(_), Syntax::Native) => "attribute",
                (Item::Block(_), Syntax::Native) => "block",
            };
            let hint = match nearest(name, &self.known) {
                Some(known) => {
                    // The typo explains why `known` is missing; one message
                    // says it better than two.
                    let missing = self.missing_message(known);
                    self.dec
                        .errors
                        .borrow_mut()
                        .retain(|err| err.pos != self.pos || err.message != missing);
                    format!(" (did you mean {known:?}?)")
                }
                None => String::new(),
            };
            self.error(
                item.span().start,
                format!("unknown {what} {name:?} in {}{hint}", self.what),
            );
        }
    }
}

fn item_name(item: &Item) -> &str {
    match item {
        Item::Attribute(attr) => &attr.key.name,
        Item::Block(block) => &block.kind.name,
    }
}

/// `a string`, `an object`: a value kind with its article.
fn article(kind: &str) -> String {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {kind}")
    } else if kind == "null" {
        kind.to_string()
    } else {
        format!("a {kind}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_offsets_count_characters_within_a_line() {
        let src = "a = \"é\"\nbb = 1\n";
        assert_eq!(byte_offset(src, Pos::new(1, 1)), 0);
        assert_eq!(byte_offset(src, Pos::new(1, 7)), 7);
        assert_eq!(byte_offset(src, Pos::new(2, 3)), 11);
        assert_eq!(byte_offset(src, Pos::new(9, 1)), src.len());
        assert_eq!(byte_offset(src, Pos::new(2, 99)), src.len());
    }
}
