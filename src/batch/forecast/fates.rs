//! What each batch is expected to do: a half of a failed batch holds the
//! change that failed it, or its sibling does.

use super::super::split::sibling;
use super::Fate;

/// What each batch of `groups` (front to back: the train's, then those
/// waiting) is expected to do, from its split group (`""`: an ordinary
/// batch; `12a`, `12a/15b`: a half of a failed batch) and its size, one
/// change failing in each bisected batch: of two halves both still there,
/// half `a` is taken to fail (it holds the members the failed pipeline's
/// test report named, when it named some; else either half may, and the
/// batches behind wait the same); a half whose sibling has gone fails when the sibling merged,
/// and merges when `sibling_failed` says the sibling failed (split again,
/// or failed for good as the change that failed CI).
pub fn fates(
    groups: &[(&str, usize)],
    sibling_failed: impl Fn(&str) -> bool,
    max_split_depth: u32,
) -> Vec<Fate> {
    groups
        .iter()
        .map(|(group, size)| {
            if group.is_empty() {
                return Fate::Merges;
            }
            let sibling = sibling(group);
            let present = |g: &str| groups.iter().any(|(other, _)| *other == g);
            let fails = match sibling.as_deref() {
                Some(sibling) if present(sibling) => group.ends_with('a'),
                Some(_) => !sibling_failed(group),
                None => true,
            };
            if fails {
                Fate::Fails {
                    halvings: halvings(*size, max_split_depth),
                }
            } else {
                Fate::Merges
            }
        })
        .collect()
}

/// How many more times a failing batch of `size` is halved (its failing
/// half each time) before one request is left. With one change failing,
/// each level has a half that passed, so `batch.max_split_depth` does not
/// stop the halving (see `one_failing_change`); at 0 nothing is split.
fn halvings(size: usize, max_split_depth: u32) -> u32 {
    if max_split_depth == 0 {
        return 0;
    }
    let (mut size, mut halvings) = (size, 0);
    while size > 1 {
        size = size.div_ceil(2);
        halvings += 1;
    }
    halvings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_half_of_each_pair_is_expected_to_fail_until_the_change_is_alone() {
        let none_failed = |_: &str| false;
        assert_eq!(
            fates(&[("", 3), ("7a", 5), ("7b", 5), ("", 9)], none_failed, 4),
            [
                Fate::Merges,
                Fate::Fails { halvings: 3 },
                Fate::Merges,
                Fate::Merges
            ]
        );
        // 7a failed and is being split, so 7b is clear; of 7a's halves the
        // first is taken to fail; a lone half whose sibling passed holds
        // the change.
        let seven_a_failed = |group: &str| group == "7b";
        assert_eq!(
            fates(&[("7b", 5), ("7a/9a", 2), ("7a/9b", 3)], seven_a_failed, 4),
            [Fate::Merges, Fate::Fails { halvings: 1 }, Fate::Merges]
        );
        assert_eq!(
            fates(&[("7a/9b", 3)], none_failed, 4),
            [Fate::Fails { halvings: 2 }]
        );
        // Its sibling failed as the change itself (one request, not split
        // again): the half left is clear.
        assert_eq!(
            fates(
                &[("", 4), ("7a/9b", 3), ("", 6)],
                |group| group == "7a/9b",
                4
            ),
            [Fate::Merges, Fate::Merges, Fate::Merges]
        );
        // The split depth does not stop the halving of one failing change:
        // 6 → 3 → 2 → 1; a depth of 0 splits nothing.
        assert_eq!(
            fates(&[("1a/2a/3a/4a", 6)], none_failed, 4),
            [Fate::Fails { halvings: 3 }]
        );
        assert_eq!(
            fates(&[("1a", 6)], none_failed, 0),
            [Fate::Fails { halvings: 0 }]
        );
    }
}
