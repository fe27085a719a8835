//! Secrets given inline or read from a file (SPEC §4): every secret key `K`
//! may instead be `K_file`, a path whose content, trailing newlines trimmed,
//! is the secret, the way Kubernetes and Docker mount secrets. The files are
//! read on every load, so a reload picks up a rotated file.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use secrecy::SecretString;
use toml::Value;

use super::reader::Reader;

/// A secret file larger than this is a wrong path (a log, a device), not a secret.
pub(super) const MAX_SECRET_BYTES: usize = 64 * 1024;

/// The files secrets were read from, by their `_file` key (e.g.
/// `gitlab.bot_token_file`); `database.password_file` is kept with the
/// static database settings instead.
#[derive(Debug, Clone, Default)]
pub struct SecretFiles(BTreeMap<String, Vec<PathBuf>>);

impl SecretFiles {
    /// The files read for `key`: one, or the list of `gitlab.reviewer_token_files`.
    pub fn get(&self, key: &str) -> &[PathBuf] {
        self.0.get(key).map_or(&[], Vec::as_slice)
    }

    /// Every file read, for watching.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.0.values().flatten().map(PathBuf::as_path)
    }
}

fn both_given(r: &mut Reader<'_>, key: &str, file_key: &str) {
    r.error(key, format!("give either {key} or {file_key}, not both"));
}

/// A secret text at `path` or in the file named at `path`'s `_file` key;
/// `None` when neither is set (blank counts as not set).
pub(super) fn text(r: &mut Reader<'_>, files: &mut SecretFiles, path: &[&str]) -> Option<String> {
    let file_name = format!("{}_file", path.last().copied().unwrap_or_default());
    let mut file_path = path.to_vec();
    if let Some(last) = file_path.last_mut() {
        *last = &file_name;
    }
    let (key, file_key) = (path.join("."), file_path.join("."));
    let inline = r.string_at(path, "");
    let file = r.string_at(&file_path, "");
    match (inline.is_empty(), file.is_empty()) {
        (_, true) => (!inline.is_empty()).then_some(inline),
        (false, false) => {
            both_given(r, &key, &file_key);
            None
        }
        (true, false) => {
            let file = PathBuf::from(file);
            let read = read_secret_file(&file).map_err(|message| r.error(&file_key, message));
            files.0.insert(file_key, vec![file]);
            read.ok()
        }
    }
}

/// [`text`] as a [`SecretString`].
pub(super) fn secret(
    r: &mut Reader<'_>,
    files: &mut SecretFiles,
    path: &[&str],
) -> Option<SecretString> {
    text(r, files, path).map(SecretString::from)
}

/// A list of secrets at `section.key` (`gitlab.reviewer_tokens`, say), or
/// the files listed at `section.files_key` (`gitlab.reviewer_token_files`).
pub(super) fn list(
    r: &mut Reader<'_>,
    files: &mut SecretFiles,
    section: &str,
    [key, files_key]: [&str; 2],
) -> Vec<SecretString> {
    let (full_key, full_files_key) = (format!("{section}.{key}"), format!("{section}.{files_key}"));
    let given = |value: Option<&Value>| match value {
        None => false,
        Some(Value::Array(items)) => !items.is_empty(),
        Some(_) => true,
    };
    let inline = r.get(section, key);
    let listed = r.get(section, files_key);
    match (given(inline), given(listed)) {
        (true, true) => {
            both_given(r, &full_key, &full_files_key);
            Vec::new()
        }
        (false, true) => {
            let paths: Vec<PathBuf> = r
                .string_list_at(&[section, files_key])
                .into_iter()
                .map(PathBuf::from)
                .collect();
            let secrets = paths
                .iter()
                .filter_map(|path| {
                    read_secret_file(path)
                        .map_err(|message| r.error(&full_files_key, message))
                        .ok()
                })
                .map(SecretString::from)
                .collect();
            files.0.insert(full_files_key, paths);
            secrets
        }
        _ => match inline {
            None => Vec::new(),
            Some(Value::Array(items)) if items.iter().all(Value::is_str) => items
                .iter()
                .filter_map(Value::as_str)
                .map(|secret| SecretString::from(secret.to_owned()))
                .collect(),
            Some(_) => {
                r.error(&full_key, "must be a list of strings");
                Vec::new()
            }
        },
    }
}

/// `database.url`, with the password from `database.password_file` when
/// that is set, and the file's path.
pub(super) fn database_url(r: &mut Reader<'_>, url: String) -> (String, Option<PathBuf>) {
    const KEY: &str = "database.password_file";
    let file = r.string("database", "password_file", "");
    if file.is_empty() {
        return (url, None);
    }
    let file = PathBuf::from(file);
    let password = match read_secret_file(&file) {
        Ok(password) => password,
        Err(message) => {
            r.error(KEY, message);
            return (url, Some(file));
        }
    };
    match with_password(&url, &password) {
        Ok(url) => (url, Some(file)),
        Err(message) => {
            r.error(KEY, message);
            (url, Some(file))
        }
    }
}

/// `url` (`scheme://user@host/...`) with `password` percent-encoded after the user.
fn with_password(url: &str, password: &str) -> Result<String, &'static str> {
    const NO_USER: &str =
        "database.url must name a user and no password, like mysql://USER@HOST/DATABASE";
    if url.starts_with("sqlite:") {
        return Err("a SQLite database takes no password");
    }
    let scheme_end = url.find("://").ok_or(NO_USER)? + 3;
    let rest = &url[scheme_end..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let at = authority.rfind('@').ok_or(NO_USER)?;
    let user = &authority[..at];
    if user.contains(':') {
        return Err(
            "database.url already holds a password: give it either there or in database.password_file, not both",
        );
    }
    if user.is_empty() {
        return Err(NO_USER);
    }
    Ok(format!(
        "{}{user}:{}{}",
        &url[..scheme_end],
        percent_encoded(password),
        &rest[at..]
    ))
}

/// Every byte but the URL's unreserved characters as `%XX`, so any password
/// survives in the user-info part of a URL.
fn percent_encoded(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// A secret file's content without its trailing newlines (`\n` or `\r\n`,
/// as editors and `echo` leave them). The message names the path, never the content.
pub(super) fn read_secret_file(path: &Path) -> Result<String, String> {
    let mut content = String::new();
    std::fs::File::open(path)
        .and_then(|file| {
            file.take(MAX_SECRET_BYTES as u64 + 1)
                .read_to_string(&mut content)
        })
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    if content.len() > MAX_SECRET_BYTES {
        return Err(format!(
            "{} is larger than {} KiB: not a secret file",
            path.display(),
            MAX_SECRET_BYTES / 1024
        ));
    }
    let kept = content.trim_end_matches(['\r', '\n']).len();
    content.truncate(kept);
    if content.trim().is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(content)
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
