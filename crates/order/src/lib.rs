//! Sorting with one copy of the sort algorithm in the binary.
//!
//! The standard library's slice sorts are generic over both the element
//! and the comparison, so every call site with its own closure compiles a
//! copy of the whole algorithm: about 4 KB of x86-64 code each, with its
//! unwind tables, some 60 copies and 0.3 MB of the static binary, whose
//! size has a budget (BENCHMARKS.md, P5). These functions instead sort a
//! permutation of the indices through one comparison type, `&mut dyn
//! FnMut(usize, usize) -> Ordering`, so the algorithm is compiled once, and
//! then move the elements into that order; only the small move stays
//! generic.
//!
//! `collect()` into a `BTreeMap` sorts its input first, with a copy of the
//! sort for each call site too (the iterator's type is part of it); [`map`]
//! builds one by inserting instead, through the insert each map type
//! compiles once. A `BTreeSet` collected sorts with one copy per element
//! type (nine of them were 31 KB); [`set`] inserts too.
//!
//! Every sort here is stable (equal elements keep their order), which also
//! serves the places that would do with an unstable one. The lists the
//! agent sorts are a job's groups, a listing's rows, a directory's entries:
//! the indirection's cost (an index vector, a call through a pointer per
//! comparison) is nothing beside building them. The slice methods are
//! refused outside tests by clippy's `disallowed_methods` (clippy.toml).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// Sorts `items` by `compare`, keeping equal elements in their order.
pub fn sort_by<T>(items: &mut [T], mut compare: impl FnMut(&T, &T) -> Ordering) {
    let order = permutation(items.len(), &mut |a, b| compare(&items[a], &items[b]));
    arrange(items, order);
}

/// Sorts `items` by the key `key` gives each, keeping elements with equal
/// keys in their order. The key is computed for each comparison, as by
/// `slice::sort_by_key`.
pub fn sort_by_key<T, K: Ord>(items: &mut [T], mut key: impl FnMut(&T) -> K) {
    sort_by(items, |a, b| key(a).cmp(&key(b)));
}

/// Sorts `items` in their natural order, keeping equal elements in their
/// order.
pub fn sort<T: Ord>(items: &mut [T]) {
    sort_by(items, T::cmp);
}

/// A map of `entries`, inserted one at a time: of two entries with the
/// same key, the later one is kept, as by `collect()`.
pub fn map<K: Ord, V>(entries: impl IntoIterator<Item = (K, V)>) -> BTreeMap<K, V> {
    let mut map = BTreeMap::new();
    map.extend(entries);
    map
}

/// A set of `items`, inserted one at a time, as `collect()` would make
/// it without its sort.
pub fn set<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeSet<T> {
    let mut set = BTreeSet::new();
    set.extend(items);
    set
}

/// The indices `0..len` in the order `compare` puts them, equal ones in
/// their own order: the one instance of the standard library's stable
/// sort that this module compiles.
#[allow(clippy::disallowed_methods)]
fn permutation(len: usize, compare: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.sort_by(|&a, &b| compare(a, b));
    order
}

/// Moves the elements of `items` so that position `i` holds the element
/// that was at `order[i]`, following each cycle of the permutation with
/// swaps: one swap per element out of place, no copies of `T`.
fn arrange<T>(items: &mut [T], order: Vec<usize>) {
    debug_assert_eq!(items.len(), order.len());
    let mut placed = vec![false; order.len()];
    for start in 0..order.len() {
        // The element first at `start` travels along its cycle: each swap
        // brings the element a position wants into it, and hands the
        // traveller on to the position that wanted it, until the
        // position that wants the traveller is reached.
        let mut here = start;
        while !placed[here] {
            placed[here] = true;
            let wanted = order[here];
            if wanted == start {
                break;
            }
            items.swap(here, wanted);
            here = wanted;
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    /// A small deterministic generator, so that the property below runs
    /// on many shapes of input without a dependency.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    #[test]
    fn sorts_as_the_standard_stable_sort_does_on_many_inputs() {
        let mut rng = Lcg(7);
        for len in 0..64 {
            for _ in 0..20 {
                // Few distinct keys, so that stability is tested: the
                // second field is the element's first position.
                let mut items: Vec<(u64, usize)> = (0..len).map(|i| (rng.next(5), i)).collect();
                let mut expected = items.clone();
                expected.sort_by_key(|item| item.0);
                sort_by_key(&mut items, |item| item.0);
                assert_eq!(items, expected, "length {len}");
            }
        }
    }

    #[test]
    fn sorts_in_natural_order_and_by_a_comparison() {
        let mut words = vec!["pear", "apple", "fig", "apple", "banana"];
        sort(&mut words);
        assert_eq!(words, ["apple", "apple", "banana", "fig", "pear"]);
        sort_by(&mut words, |a, b| b.len().cmp(&a.len()));
        assert_eq!(words, ["banana", "apple", "apple", "pear", "fig"]);
    }

    #[test]
    fn moves_elements_that_own_memory_without_losing_or_doubling_any() {
        let mut owned: Vec<String> = ["c", "a", "d", "b", "a"].map(String::from).to_vec();
        sort(&mut owned);
        assert_eq!(owned, ["a", "a", "b", "c", "d"]);
        let mut empty: Vec<String> = Vec::new();
        sort(&mut empty);
        assert!(empty.is_empty());
    }

    #[test]
    fn builds_maps_as_collect_does() {
        let entries = [("b", 1), ("a", 2), ("b", 3), ("c", 4)];
        let collected: BTreeMap<&str, i32> = entries.into_iter().collect();
        assert_eq!(map(entries), collected);
        assert_eq!(map(entries).get("b"), Some(&3), "the later entry wins");
    }

    #[test]
    fn builds_sets_as_collect_does() {
        let items = ["b", "a", "b", "c", "a"];
        let collected: BTreeSet<&str> = items.into_iter().collect();
        assert_eq!(set(items), collected);
        assert_eq!(set(items).len(), 3);
        assert!(set(Vec::<String>::new()).is_empty());
    }

    #[test]
    fn computes_keys_with_state_as_the_standard_sort_allows() {
        let mut calls = 0;
        let mut items = vec![3, 1, 2];
        sort_by_key(&mut items, |&x| {
            calls += 1;
            x
        });
        assert_eq!(items, [1, 2, 3]);
        assert!(calls >= 2, "the key was asked {calls} times");
    }
}
