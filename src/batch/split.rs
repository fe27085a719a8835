//! The names of a failed batch's halves: its members wait in split groups
//! `{parent}{id}a` and `{parent}{id}b` (`12a`, `12a/15b`), so the group
//! says which batch each half comes from and which half is its sibling.

/// The other half of the same failed batch: `12a` ↔ `12b`; `None` for an
/// ordinary group (`""`).
pub(super) fn sibling(group: &str) -> Option<String> {
    let (stem, last) = group.split_at(group.len().checked_sub(1)?);
    match last {
        "a" => Some(format!("{stem}b")),
        "b" => Some(format!("{stem}a")),
        _ => None,
    }
}

/// Whether two groups are the two halves of one failed batch: they are
/// built side by side, neither on the other, as at most one of them holds
/// the change that failed it.
pub(super) fn are_siblings(group: &str, other: &str) -> bool {
    sibling(group).as_deref() == Some(other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_of_one_failed_batch_are_siblings_and_nothing_else_is() {
        assert!(are_siblings("12a", "12b"));
        assert!(are_siblings("7a/12b", "7a/12a"));
        assert!(!are_siblings("12a", "13b"));
        assert!(!are_siblings("7a/12a", "7b/12b"));
        assert!(!are_siblings("", ""));
        assert!(!are_siblings("12a", "12a"));
        assert_eq!(sibling(""), None);
    }
}
