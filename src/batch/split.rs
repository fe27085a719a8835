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

/// Each level of a bisection that led to `group`, from the first: the
/// failed batch it was split off (by id) and the group of the other half
/// of it (`12a/15b` → `(12, 12b)`, `(15, 12a/15a)`).
pub(super) fn levels(group: &str) -> Vec<(i64, String)> {
    let mut levels = Vec::new();
    let mut path = String::new();
    for segment in group.split('/').filter(|segment| !segment.is_empty()) {
        let parent = segment[..segment.len() - 1].parse();
        if let (Ok(parent), Some(other)) = (parent, sibling(segment)) {
            levels.push((parent, format!("{path}{other}")));
        }
        path.push_str(segment);
        path.push('/');
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_names_the_failed_batch_and_the_other_half_of_it() {
        assert_eq!(
            levels("12a/15b"),
            [(12, "12b".to_owned()), (15, "12a/15a".to_owned())]
        );
        assert_eq!(levels(""), []);
    }

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
