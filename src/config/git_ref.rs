//! Whether a name can be a branch on GitLab: git's reference rules
//! (`git check-ref-format`) plus GitLab's own refusals of names that start
//! with `refs/heads/`, `refs/remotes/` or `-`, and of `HEAD`
//! (lib/gitlab/git_ref_validator.rb). A branch GitLab would refuse is told
//! at load, not found out by a failing request.

/// Bytes git never allows in a reference name.
const FORBIDDEN: &[char] = &[' ', '~', '^', ':', '?', '*', '[', '\\'];

/// Why `name` cannot be a branch name, or `None` when it can.
pub(crate) fn branch_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty");
    }
    if name == "HEAD" || name == "@" {
        return Some("is a name git reserves");
    }
    if ["refs/heads/", "refs/remotes/", "-"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
    {
        return Some("starts with refs/heads/, refs/remotes/ or -, which GitLab refuses");
    }
    if name
        .chars()
        .any(|c| c.is_ascii_control() || FORBIDDEN.contains(&c))
    {
        return Some("holds a space, a control character or one of ~ ^ : ? * [ \\");
    }
    if name.contains("..") || name.contains("@{") {
        return Some("holds .. or @{");
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Some("has an empty path component");
    }
    if name.ends_with('.') {
        return Some("ends with a dot");
    }
    if name
        .split('/')
        .any(|part| part.starts_with('.') || part.ends_with(".lock"))
    {
        return Some("has a component starting with a dot or ending with .lock");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::branch_name_problem;

    #[test]
    fn names_git_and_gitlab_accept_pass_and_the_others_say_why() {
        for good in [
            "main",
            "release/2026.12",
            "changegate/batch-17",
            "changegate/merge-batch-17",
            "changegate/3f2b6c1e-8f0a-4c1d-9d55-2b1f7a0e9c42",
            "feature_x-1",
            "ünïcode",
        ] {
            assert_eq!(branch_name_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "HEAD",
            "@",
            "-main",
            "refs/heads/main",
            "refs/remotes/origin/main",
            "with space",
            "tab\there",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[0]",
            "a\\b",
            "a..b",
            "a@{1}",
            "/main",
            "main/",
            "a//b",
            "main.",
            ".hidden",
            "a/.hidden",
            "main.lock",
            "a.lock/b",
        ] {
            assert!(branch_name_problem(bad).is_some(), "{bad:?}");
        }
    }
}
