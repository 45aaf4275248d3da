//! The variables in scope while a template is parsed or rendered: a stack
//! that blocks truncate at their end, with each name's innermost entry
//! found at once. A template may declare many variables; finding one by a
//! walk down the stack would make each reference cost as much as the
//! declarations before it, and a long template quadratic.

use std::collections::HashMap;

#[derive(Debug)]
pub(super) struct Scope<V> {
    /// Every variable in scope, in declaration order.
    entries: Vec<(String, V)>,
    /// Where each name's entries are in `entries`, innermost last.
    by_name: HashMap<String, Vec<usize>>,
}

impl<V> Scope<V> {
    /// A scope holding only `$`, the top-level dot.
    pub(super) fn new(dot: V) -> Scope<V> {
        let mut scope = Scope {
            entries: Vec::new(),
            by_name: HashMap::new(),
        };
        scope.push(String::new(), dot);
        scope
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn push(&mut self, name: String, value: V) {
        self.by_name
            .entry(name.clone())
            .or_default()
            .push(self.entries.len());
        self.entries.push((name, value));
    }

    /// Drops the variables declared after the first `len`.
    pub(super) fn truncate(&mut self, len: usize) {
        while self.entries.len() > len {
            let Some((name, _)) = self.entries.pop() else {
                break;
            };
            if let Some(at) = self.by_name.get_mut(&name) {
                at.pop();
                if at.is_empty() {
                    self.by_name.remove(&name);
                }
            }
        }
    }

    /// The innermost variable called `name`.
    pub(super) fn get(&self, name: &str) -> Option<&V> {
        let at = *self.by_name.get(name)?.last()?;
        Some(&self.entries[at].1)
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        let at = *self.by_name.get(name)?.last()?;
        Some(&mut self.entries[at].1)
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_declaration_wins_until_its_block_ends() {
        let mut scope = Scope::new(0);
        scope.push("x".into(), 1);
        let mark = scope.len();
        scope.push("x".into(), 2);
        scope.push("y".into(), 3);
        assert_eq!(scope.get("x"), Some(&2));
        *scope.get_mut("x").unwrap() = 4;
        scope.truncate(mark);
        assert_eq!(scope.get("x"), Some(&1));
        assert!(!scope.contains("y"));
        assert_eq!(scope.get(""), Some(&0));
    }
}
