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
//!
//! This file holds the decoder, a block's bookkeeping (known keys, nested
//! and labeled blocks, ignored and unknown items) and the block getters;
//! the getters of attribute values (strings, numbers, durations, lists,
//! maps) are `decode/values.rs`.

mod values;

use std::cell::RefCell;
use std::collections::BTreeMap;

use hcl::{Attribute, Block, Body, Item, Pos, Span, Syntax};

use super::encode::kept_text;
use super::suggest::nearest;
use super::variables::{self, JobInputs};
use super::{Decoded, Invalid, Kept, Warning};
pub(crate) use values::MapEntry;

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
        Decoder::run_with(src, file, None, decode)
    }

    /// [`Decoder::run`] for a job file, whose variables get their values
    /// from `inputs`. Expressions are evaluated between parsing and
    /// decoding: an error there stops, as a syntax error does.
    pub(crate) fn run_with<T>(
        src: &'a str,
        file: &'a str,
        inputs: Option<&JobInputs>,
        decode: impl FnOnce(&Decoder<'_>, &Body) -> T,
    ) -> Result<Decoded<T>, Invalid> {
        let mut body = hcl::parse_file(src, file).map_err(|err| Invalid {
            errors: vec![err],
            warnings: Vec::new(),
        })?;
        let mut warnings = Vec::new();
        let evaluated = match inputs {
            Some(inputs) => variables::resolve(&mut body, file, inputs, &mut warnings),
            _ => variables::evaluate_plain(&mut body, file),
        };
        if let Err(errors) = evaluated {
            return Err(Invalid { errors, warnings });
        }
        if inputs.is_some() {
            // A job file: tasks written right in its job block get groups.
            super::job_level_tasks::group_job_level_tasks(&mut body);
        }
        let decoder = Decoder {
            file,
            src,
            errors: RefCell::new(Vec::new()),
            warnings: RefCell::new(warnings),
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
        order::sort_by_key(&mut errors, |err| err.pos);
        order::sort_by_key(&mut warnings, |warning| warning.pos);
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

    /// Every block of this kind, written as blocks (`mount { ... }`) or as
    /// an attribute holding an object or a list of objects (`devices =
    /// [{ ... }]`): Nomad's docker driver takes both forms.
    pub(crate) fn blocks_or_objects(&mut self, kind: &'static str) -> Vec<&'d Block> {
        self.known.push(kind);
        if self.body.syntax == Syntax::Json {
            return self.json_blocks(kind, false);
        }
        let mut out: Vec<&'d Block> = self
            .body
            .blocks_named(kind)
            .filter(|block| self.no_labels(block))
            .collect();
        if self.body.attribute(kind).is_some() {
            out.extend(self.json_blocks(kind, false));
        }
        out
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

    /// Registers Nomad's keys that csi-agent refuses, each with why (what
    /// a job relying on it would lose): each one present is an error at
    /// its line.
    pub(crate) fn refuse(&mut self, keys: &[(&'static str, &'static str)]) {
        for (key, _) in keys {
            self.known.push(key);
        }
        for item in &self.body.items {
            let name = item_name(item);
            if let Some((_, why)) = keys.iter().find(|(key, _)| *key == name) {
                self.dec.error(
                    item.span().start,
                    format!(
                        "{name:?} in {} is not supported by csi-agent: {why}",
                        self.what
                    ),
                );
            }
        }
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
