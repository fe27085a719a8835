//! How many members fit in one batch: in its MR's description (every
//! member's trailer whole) and in its one commit (below GitLab's throttle).

use crate::files::layout::FileChange;

/// The most file bytes one batch commit carries. GitLab's commits API
/// refuses a request over 300 MiB and lets a user make only three commits
/// over 20 MiB every 30 seconds (app/uploaders/repositories/commits_uploader.rb
/// `MAX_RATE_LIMITED_REQUEST_SIZE`, lib/api/helpers/commits_body_uploader_helper.rb
/// `check_large_request_rate_limit!`): a batch stays below the throttled size,
/// with room for the JSON around the contents.
pub(super) const MAX_COMMIT_BYTES: usize = 16 << 20;

/// How many of `changes`, in order, fit in one commit of at most `limit`
/// bytes of paths and contents. A shared file's edits are counted by
/// their values: the file itself is written once, whatever its size.
pub(super) fn changes_that_fit(changes: &[FileChange], limit: usize) -> usize {
    let mut used = 0;
    for (fitted, change) in changes.iter().enumerate() {
        used += change.weight();
        if used > limit {
            return fitted;
        }
    }
    changes.len()
}

/// How many of `trailers` (one per line) fit after a header of
/// `header_len` bytes in a description of at most `limit` bytes.
pub(super) fn members_that_fit(header_len: usize, trailers: &[String], limit: usize) -> usize {
    let mut used = header_len;
    for (fitted, trailer) in trailers.iter().enumerate() {
        let separator = usize::from(fitted > 0);
        used += separator + trailer.len();
        if used > limit {
            return fitted;
        }
    }
    trailers.len()
}

#[cfg(test)]
mod tests {
    use super::{FileChange, changes_that_fit, members_that_fit};

    #[test]
    fn only_whole_trailers_that_fit_the_description_are_kept() {
        let trailers: Vec<String> = (0..5).map(|n| format!("trailer-{n}")).collect();
        // "header" + "trailer-0\ntrailer-1" is 6 + 9 + 1 + 9 = 25 bytes.
        assert_eq!(members_that_fit(6, &trailers, 25), 2);
        assert_eq!(members_that_fit(6, &trailers, 24), 1);
        assert_eq!(members_that_fit(6, &trailers, 1 << 20), 5);
        assert_eq!(members_that_fit(6, &trailers, 6), 0);
    }

    #[test]
    fn only_files_that_fit_one_commit_are_kept() {
        let change = |content: Option<&str>| FileChange::Whole {
            path: "a/b.json".to_owned(),
            content: content.map(str::to_owned),
        };
        // Each create is 8 bytes of path and 10 of content; a delete only its path.
        let changes = [
            change(Some("0123456789")),
            change(None),
            change(Some("0123456789")),
        ];
        assert_eq!(changes_that_fit(&changes, 18), 1);
        assert_eq!(changes_that_fit(&changes, 26), 2);
        assert_eq!(changes_that_fit(&changes, 44), 3);
        assert_eq!(changes_that_fit(&changes, 17), 0);
    }
}
