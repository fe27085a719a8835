//! The names of a failed batch's halves: its members wait in split groups
//! `{parent}{id}a` and `{parent}{id}b` (`12a`, `12a/15b`), so the group
//! says which batch each half comes from and which half is its sibling;
//! and which members go to which half.

/// A failed batch's members as its two halves.
#[derive(Debug, PartialEq)]
pub(super) struct Halves {
    /// Half `a`: the members the test report named, or the first half of
    /// the queue order.
    pub a: Vec<String>,
    /// Half `b`: the others.
    pub b: Vec<String>,
    /// Whether the test report chose them.
    pub reported: bool,
}

/// A failed batch's members (`ids`, in queue order) as its halves `a` and
/// `b`. When the failed pipeline's test report named the files of some of
/// them and not all (`suspects`), they are half `a` and the others half
/// `b`: with one change failing CI, `b` then passes at its first try and
/// `a` is that change alone, or is halved again. Otherwise the first half
/// of the queue order is `a`.
pub(super) fn halves(ids: &[String], suspects: &[String]) -> Halves {
    let (named, others): (Vec<String>, Vec<String>) =
        ids.iter().cloned().partition(|id| suspects.contains(id));
    if named.is_empty() || others.is_empty() {
        let (a, b) = ids.split_at(ids.len() / 2);
        return Halves {
            a: a.to_vec(),
            b: b.to_vec(),
            reported: false,
        };
    }
    Halves {
        a: named,
        b: others,
        reported: true,
    }
}

/// `items` (waiting groups in queue order, `group` naming each one's
/// split group) in the order they board in a train deeper than one: where
/// half `b` of a failed batch comes before its sibling `a`, `a` takes its
/// place and `b` follows it, as the claim boards them (`claim.rs`,
/// `first_half`; one batch at a time boards in queue order).
pub(super) fn in_boarding_order<T>(items: &mut Vec<T>, group: impl Fn(&T) -> &str) {
    let mut index = 0;
    while index < items.len() {
        let half_a = sibling(group(&items[index])).filter(|other| other.ends_with('a'));
        let later = half_a.and_then(|half_a| {
            items[index + 1..]
                .iter()
                .position(|item| group(item) == half_a)
        });
        if let Some(offset) = later {
            let item = items.remove(index + 1 + offset);
            items.insert(index, item);
            index += 1;
        }
        index += 1;
    }
}

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

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn the_members_a_test_report_names_are_half_a_and_the_others_half_b() {
        let members = ids(&["o1", "o2", "o3", "o4", "o5"]);
        let reported = |a: &[&str], b: &[&str]| Halves {
            a: ids(a),
            b: ids(b),
            reported: true,
        };
        assert_eq!(
            halves(&members, &ids(&["o4"])),
            reported(&["o4"], &["o1", "o2", "o3", "o5"])
        );
        assert_eq!(
            halves(&members, &ids(&["o5", "o2"])),
            reported(&["o2", "o5"], &["o1", "o3", "o4"])
        );
    }

    #[test]
    fn without_a_report_naming_some_members_and_not_all_the_queue_order_is_halved() {
        let members = ids(&["o1", "o2", "o3", "o4", "o5"]);
        let by_order = Halves {
            a: ids(&["o1", "o2"]),
            b: ids(&["o3", "o4", "o5"]),
            reported: false,
        };
        assert_eq!(halves(&members, &[]), by_order);
        assert_eq!(halves(&members, &members), by_order);
        assert_eq!(halves(&members, &ids(&["elsewhere"])), by_order);
    }

    #[test]
    fn half_a_boards_in_the_place_of_its_sibling_b_when_b_waits_first() {
        let mut waiting = vec!["", "7b", "", "9a", "7a", "9b", "3a/8b", "3a/8a"];
        in_boarding_order(&mut waiting, |group| group);
        assert_eq!(waiting, ["", "7a", "7b", "", "9a", "9b", "3a/8a", "3a/8b"]);
    }

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
