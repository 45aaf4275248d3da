//! Did-you-mean: the known name nearest to a misspelt one.
//!
//! The distance counts the edits typing goes wrong with: a letter missed,
//! doubled, replaced, or two neighbours swapped (`tpye`). A suggestion is
//! made only when the names are close enough for it to be a typo, so that
//! a key from another program's format gets no misleading hint.

/// The known name closest to `name`, if it is close enough to be a typo:
/// at most two edits, and at most a third of the name's length.
pub(crate) fn nearest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    let lower = name.to_lowercase();
    known
        .iter()
        .map(|candidate| (edit_distance(&lower, candidate), *candidate))
        .filter(|&(distance, _)| distance <= 2 && distance * 3 <= name.chars().count().max(3))
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// The edit distance between two strings, counted in characters: the
/// insertions, deletions, substitutions and swaps of neighbours that turn
/// one into the other (the optimal string alignment distance).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the table: two back, one back, and the current one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for i in 0..a.len() {
        current[0] = i + 1;
        for j in 0..b.len() {
            let substitute = previous[j] + usize::from(a[i] != b[j]);
            let mut best = substitute.min(previous[j + 1] + 1).min(current[j] + 1);
            if i > 0 && j > 0 && a[i] == b[j - 1] && a[i - 1] == b[j] {
                best = best.min(before[j - 1] + 1);
            }
            current[j + 1] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_insertions_deletions_substitutions_and_swaps() {
        assert_eq!(edit_distance("acess_mode", "access_mode"), 1);
        assert_eq!(edit_distance("access_mode", "acess_mode"), 1);
        assert_eq!(edit_distance("mode", "node"), 1);
        assert_eq!(edit_distance("tpye", "type"), 1);
        assert_eq!(edit_distance("cuont", "count"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn nearest_suggests_only_plausible_typos() {
        let known = ["access_mode", "attachment_mode", "read_only", "source"];
        assert_eq!(nearest("acess_mode", &known), Some("access_mode"));
        assert_eq!(nearest("Read_Only", &known), Some("read_only"));
        assert_eq!(nearest("sauce", &known), None);
        assert_eq!(nearest("image", &known), None);
        assert_eq!(nearest("sourec", &known), Some("source"));
    }
}
