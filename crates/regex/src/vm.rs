//! The pattern's tree compiled to a program, and the program run by a Pike
//! VM: every thread of the program advances in lockstep over the text, one
//! character at a time, and a program counter holds at most one thread per
//! position, so a match takes time proportional to the text's length times
//! the program's, whatever the pattern (no backtracking). Threads are kept
//! in priority order, which gives Perl's and Go's leftmost-first matches:
//! greedy repetitions prefer more, lazy ones less, alternation its left
//! branch.

use super::parse::{other_cases, Assertion, Class, Node};
use super::Error;

/// The most instructions a program may have: a bound on the time a match
/// takes per character of the text, and on memory.
pub(super) const MAX_PROGRAM: usize = 20_000;

#[derive(Debug, Clone)]
enum Inst {
    Char {
        c: char,
        fold: bool,
    },
    Class(Class),
    Any {
        newline: bool,
    },
    Assert(Assertion),
    /// Try the first, then the second.
    Split(usize, usize),
    Jmp(usize),
    /// Record the position in capture slot n.
    Save(usize),
    Match,
}

/// The steps of the VM one call may take in all (a thread run at a
/// position, or an instruction followed when a thread is added), and those
/// taken so far: a search that runs out stops and says so.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    pub(super) taken: u64,
    pub(super) limit: u64,
}

impl Budget {
    /// Takes one step; `false` once the limit is passed.
    fn step(&mut self) -> bool {
        self.taken += 1;
        self.taken <= self.limit
    }

    pub(super) fn exhausted(&self) -> bool {
        self.taken > self.limit
    }
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub(super) struct Program {
    insts: Vec<Inst>,
    /// Two slots per group, the whole match's included.
    pub(super) slots: usize,
}

/// Compiles `node`, whose groups number `groups` with the whole match.
pub(super) fn compile(node: &Node, groups: usize) -> Result<Program, Error> {
    let mut compiler = Compiler { insts: Vec::new() };
    compiler.push(Inst::Save(0))?;
    compiler.node(node)?;
    compiler.push(Inst::Save(1))?;
    compiler.push(Inst::Match)?;
    Ok(Program {
        insts: compiler.insts,
        slots: groups * 2,
    })
}

struct Compiler {
    insts: Vec<Inst>,
}

impl Compiler {
    fn push(&mut self, inst: Inst) -> Result<usize, Error> {
        if self.insts.len() >= MAX_PROGRAM {
            return Err(Error {
                position: 0,
                message: format!(
                    "the pattern is too large: it compiles to more than {MAX_PROGRAM} instructions"
                ),
            });
        }
        self.insts.push(inst);
        Ok(self.insts.len() - 1)
    }

    /// Points the split or jump at `at` to `target` (its second branch for
    /// a split).
    fn patch(&mut self, at: usize, target: usize) {
        match &mut self.insts[at] {
            Inst::Split(_, second) => *second = target,
            Inst::Jmp(to) => *to = target,
            _ => {}
        }
    }

    fn node(&mut self, node: &Node) -> Result<(), Error> {
        match node {
            Node::Empty => {}
            Node::Char { c, fold } => {
                self.push(Inst::Char { c: *c, fold: *fold })?;
            }
            Node::Class(class) => {
                self.push(Inst::Class(class.clone()))?;
            }
            Node::Any { newline } => {
                self.push(Inst::Any { newline: *newline })?;
            }
            Node::Assert(assertion) => {
                self.push(Inst::Assert(*assertion))?;
            }
            Node::Group { index, node } => match index {
                Some(i) => {
                    self.push(Inst::Save(2 * i))?;
                    self.node(node)?;
                    self.push(Inst::Save(2 * i + 1))?;
                }
                None => self.node(node)?,
            },
            Node::Concat(items) => {
                for item in items {
                    self.node(item)?;
                }
            }
            Node::Alternate(branches) => {
                let mut jumps = Vec::new();
                for (i, branch) in branches.iter().enumerate() {
                    if i + 1 == branches.len() {
                        self.node(branch)?;
                        break;
                    }
                    let split = self.push(Inst::Split(0, 0))?;
                    if let Inst::Split(first, _) = &mut self.insts[split] {
                        *first = split + 1;
                    }
                    self.node(branch)?;
                    jumps.push(self.push(Inst::Jmp(0))?);
                    let next = self.insts.len();
                    self.patch(split, next);
                }
                let end = self.insts.len();
                for jump in jumps {
                    self.patch(jump, end);
                }
            }
            Node::Repeat {
                node,
                min,
                max,
                greedy,
            } => self.repeat(node, *min, *max, *greedy)?,
        }
        Ok(())
    }

    /// `node` at least `min` times, at most `max` (no bound for `None`).
    fn repeat(
        &mut self,
        node: &Node,
        min: u32,
        max: Option<u32>,
        greedy: bool,
    ) -> Result<(), Error> {
        for _ in 0..min {
            self.node(node)?;
        }
        match max {
            None if nullable(node) => {
                // A body that may match empty loops as `(body+)?`, as Go
                // compiles it: split(body, out); body; split(body, out).
                // With `L: split; body; jmp L` an empty pass would run into
                // L, already seen, and die, leaving the non-empty passes to
                // win where Go's leftmost-first prefers the empty one
                // (`(?:|a)*` on "aaa" matches "").
                let first = self.push(Inst::Split(0, 0))?;
                self.node(node)?;
                let again = self.push(Inst::Split(0, 0))?;
                let out = self.insts.len();
                self.set_split(first, first + 1, out, greedy);
                self.set_split(again, first + 1, out, greedy);
            }
            None => {
                // L: split(body, out); body; jmp L
                let split = self.push(Inst::Split(0, 0))?;
                self.node(node)?;
                self.push(Inst::Jmp(split))?;
                let out = self.insts.len();
                self.set_split(split, split + 1, out, greedy);
            }
            Some(max) => {
                // Each optional copy: split(body, out); body; ... all
                // splits leave to the end.
                let mut splits = Vec::new();
                for _ in min..max {
                    splits.push(self.push(Inst::Split(0, 0))?);
                    self.node(node)?;
                }
                let out = self.insts.len();
                for split in splits {
                    self.set_split(split, split + 1, out, greedy);
                }
            }
        }
        Ok(())
    }

    /// Makes the split at `at` prefer `body` when greedy, `out` when lazy.
    fn set_split(&mut self, at: usize, body: usize, out: usize, greedy: bool) {
        self.insts[at] = if greedy {
            Inst::Split(body, out)
        } else {
            Inst::Split(out, body)
        };
    }
}

/// Whether `node` can match the empty string.
fn nullable(node: &Node) -> bool {
    match node {
        Node::Empty | Node::Assert(_) => true,
        Node::Char { .. } | Node::Class(_) | Node::Any { .. } => false,
        Node::Group { node, .. } => nullable(node),
        Node::Concat(items) => items.iter().all(nullable),
        Node::Alternate(branches) => branches.iter().any(nullable),
        Node::Repeat { node, min, .. } => *min == 0 || nullable(node),
    }
}

/// A thread: where it is in the program, and its capture slots.
struct Thread {
    pc: usize,
    slots: Vec<Option<usize>>,
}

/// The threads at one position, in priority order, with at most one per
/// program counter.
struct Threads {
    list: Vec<Thread>,
    seen: Vec<bool>,
}

impl Threads {
    fn new(size: usize) -> Threads {
        Threads {
            list: Vec::new(),
            seen: vec![false; size],
        }
    }

    fn clear(&mut self) {
        self.list.clear();
        self.seen.iter_mut().for_each(|s| *s = false);
    }
}

impl Program {
    /// How many instructions the program has.
    pub(super) fn len(&self) -> usize {
        self.insts.len()
    }

    /// The leftmost-first match in `text` starting at or after byte offset
    /// `start`: the capture slots (byte offsets), or `None`, also when
    /// `budget` runs out (which it then says).
    pub(super) fn find_at(
        &self,
        text: &str,
        start: usize,
        budget: &mut Budget,
    ) -> Option<Vec<Option<usize>>> {
        let mut current = Threads::new(self.insts.len());
        let mut next = Threads::new(self.insts.len());
        let mut matched = None;
        let mut stack = Vec::new();
        let mut pos = start;
        loop {
            if matched.is_none() {
                // A new thread at each position, below those already
                // running: leftmost first.
                let slots = vec![None; self.slots];
                self.add(&mut current, &mut stack, (0, slots), (text, pos), budget);
            }
            if budget.exhausted() {
                return None;
            }
            if current.list.is_empty() && matched.is_some() {
                break;
            }
            let c = text[pos..].chars().next();
            let after = pos + c.map_or(0, char::len_utf8);
            for thread in std::mem::take(&mut current.list) {
                if !budget.step() {
                    return None;
                }
                let advance = match (&self.insts[thread.pc], c) {
                    (Inst::Match, _) => {
                        matched = Some(thread.slots);
                        // Lower-priority threads are cut off.
                        break;
                    }
                    (Inst::Char { c: want, fold }, Some(c)) => {
                        c == *want || (*fold && other_cases(c).any(|o| o == *want))
                    }
                    (Inst::Class(class), Some(c)) => class.matches(c),
                    (Inst::Any { newline }, Some(c)) => *newline || c != '\n',
                    _ => false,
                };
                if advance {
                    self.add(
                        &mut next,
                        &mut stack,
                        (thread.pc + 1, thread.slots),
                        (text, after),
                        budget,
                    );
                }
            }
            std::mem::swap(&mut current, &mut next);
            next.clear();
            if c.is_none() {
                // The threads that wanted a character past the end die.
                break;
            }
            pos = after;
        }
        matched
    }

    /// Adds the thread at `pc` to `threads`, following jumps, splits (in
    /// priority order), saves and assertions at once, with an explicit
    /// stack: no recursion however long the program.
    fn add(
        &self,
        threads: &mut Threads,
        stack: &mut Vec<(usize, Vec<Option<usize>>)>,
        thread: (usize, Vec<Option<usize>>),
        (text, pos): (&str, usize),
        budget: &mut Budget,
    ) {
        stack.push(thread);
        while let Some((pc, mut slots)) = stack.pop() {
            if threads.seen[pc] {
                continue;
            }
            if !budget.step() {
                stack.clear();
                return;
            }
            threads.seen[pc] = true;
            match &self.insts[pc] {
                Inst::Jmp(to) => stack.push((*to, slots)),
                Inst::Split(first, second) => {
                    stack.push((*second, slots.clone()));
                    stack.push((*first, slots));
                }
                Inst::Save(slot) => {
                    if let Some(s) = slots.get_mut(*slot) {
                        *s = Some(pos);
                    }
                    stack.push((pc + 1, slots));
                }
                Inst::Assert(assertion) => {
                    if holds(*assertion, text, pos) {
                        stack.push((pc + 1, slots));
                    }
                }
                _ => threads.list.push(Thread { pc, slots }),
            }
        }
    }
}

/// Whether `assertion` holds at byte offset `pos` of `text`.
fn holds(assertion: Assertion, text: &str, pos: usize) -> bool {
    let before = text[..pos].chars().next_back();
    let after = text[pos..].chars().next();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    match assertion {
        Assertion::TextStart => pos == 0,
        Assertion::TextEnd => pos == text.len(),
        Assertion::LineStart => before.map_or(true, |c| c == '\n'),
        Assertion::LineEnd => after.map_or(true, |c| c == '\n'),
        Assertion::WordBoundary => word(before) != word(after),
        Assertion::NotWordBoundary => word(before) == word(after),
    }
}
