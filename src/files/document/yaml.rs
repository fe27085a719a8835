//! YAML: values read and written with `serde-saphyr`, edits made with
//! `yaml-edit`, a lossless (rowan) syntax tree that keeps every comment,
//! blank line and entry it is not asked to change.
//!
//! Why these: `yamlpatch` (zizmor's tree-sitter patcher) was tried first.
//! It could not replace a value with a mapping ("input is not valid YAML"),
//! indented a nested mapping added at the top level wrongly, refused an empty
//! document, and its current release needs a newer Rust than ours; it is
//! made for small patches to GitHub workflows. `yaml-edit` did each of
//! those right, in block style. `serde-saphyr` is pure Rust, refuses
//! duplicate keys, and quotes strings that a YAML 1.1 reader would take for
//! something else (`"yes"`, `"n"`, `"1.5"`), since other programs read these
//! files too; serde_yaml_ng writes `yes` bare.
//!
//! A value written new is block style with two-space indent (lists at their
//! key's indent, the common style), strings with newlines as `|` blocks.
//! Where the file is indented otherwise, the new lines follow the parent's
//! indent. Removing a key removes its line and its trailing comment; a
//! comment on the lines above it stays. Anchors and aliases are kept as
//! written; a key under an alias or a tagged value cannot be edited (the
//! check in `set_key` refuses an edit whose effect reaches an alias).

use std::str::FromStr;

use serde_json::{Map, Value};
use yaml_edit::{Mapping, YamlFile};

use super::{DocumentError, dotted, nested};

/// The document's value; an empty document (or only comments) is null.
pub(super) fn parse(text: &str) -> Result<Value, DocumentError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    serde_saphyr::from_str_with_options(text, options).map_err(|err| {
        // The user formatter: the default one gives Rust API advice.
        let message = err
            .without_snippet()
            .render_with_formatter(&serde_saphyr::UserMessageFormatter);
        let message = message.strip_prefix("error: ").unwrap_or(&message);
        DocumentError(format!(
            "not valid YAML: {}",
            message.trim().replace('\n', "; ")
        ))
    })
}

/// Block style, two-space indent, keys in the map's order.
pub(super) fn render(value: &Value) -> Result<String, DocumentError> {
    let text = emit(value, Scalars::Block)?;
    // A last string ending in blank lines (`|+`) would end the file in
    // blank lines too.
    if !text.ends_with("\n\n") && parse(&text).is_ok_and(|back| &back == value) {
        return Ok(text);
    }
    // A string the block style cannot carry exactly: every string quoted
    // on one line instead.
    let text = emit(value, Scalars::Quoted)?;
    if parse(&text).is_ok_and(|back| &back == value) {
        return Ok(text);
    }
    Err(DocumentError::new(
        "the value cannot be written as YAML that reads back the same",
    ))
}

/// How strings are written: `|` blocks for multi-line strings, or quoted
/// on one line with escapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scalars {
    /// `|` blocks for strings with newlines: what a person would write.
    Block,
    /// Every string on one line: the fallback when a block would not read
    /// back the same.
    Quoted,
}

/// `text` with `value` at `key`; `current` is `text` parsed, whose value at
/// `key` differs and whose intermediates are mappings, null or absent.
pub(super) fn set(
    text: &str,
    current: &Value,
    key: &[String],
    value: &Value,
    scalars: Scalars,
) -> Result<String, DocumentError> {
    let file = editor(text)?;
    let document = file.ensure_document();
    match document.as_mapping() {
        Some(root) => set_in(&root, current, key, value, scalars, key)?,
        // Only comments so far: the whole key is new.
        None => {
            let Some((first, rest)) = key.split_first() else {
                return Ok(text.to_owned());
            };
            let name = fragment(&Value::String(first.clone()), Scalars::Quoted)?;
            let fragment = fragment(&nested(rest, value.clone()), scalars)?;
            if !document.set(&name, &fragment) {
                return Err(DocumentError::new(
                    "the YAML document is not a mapping: it has no keys to edit",
                ));
            }
        }
    }
    Ok(file.to_string())
}

/// `text` without the value at `key`, which the caller has checked is there.
pub(super) fn remove(text: &str, key: &[String]) -> Result<String, DocumentError> {
    let file = editor(text)?;
    let Some((last, parents)) = key.split_last() else {
        return Ok(text.to_owned());
    };
    let mut mapping = file
        .document()
        .and_then(|document| document.as_mapping())
        .ok_or_else(|| DocumentError::new("the YAML document is not a mapping"))?;
    for (depth, segment) in parents.iter().enumerate() {
        mapping = mapping
            .get_mapping(segment.as_str())
            .ok_or_else(|| unreachable_mapping(&key[..=depth]))?;
    }
    mapping.remove(last.as_str());
    Ok(file.to_string())
}

fn editor(text: &str) -> Result<YamlFile, DocumentError> {
    YamlFile::from_str(text)
        .map_err(|err| DocumentError(format!("the YAML editor cannot read this file: {err}")))
}

fn set_in(
    mapping: &Mapping,
    old: &Value,
    key: &[String],
    value: &Value,
    scalars: Scalars,
    whole_key: &[String],
) -> Result<(), DocumentError> {
    let Some((first, rest)) = key.split_first() else {
        return Ok(());
    };
    let old_child = old.get(first).unwrap_or(&Value::Null);
    if rest.is_empty() {
        return assign(mapping, first, old_child, value, scalars);
    }
    match old_child {
        Value::Object(_) => {
            let depth = whole_key.len() - rest.len();
            let inner = mapping
                .get_mapping(first.as_str())
                .ok_or_else(|| unreachable_mapping(&whole_key[..depth]))?;
            set_in(&inner, old_child, rest, value, scalars, whole_key)
        }
        // Absent, or null (`pools:` with nothing under it): the rest is new.
        _ => put(mapping, first, &nested(rest, value.clone()), scalars),
    }
}

/// The value at `name`, `old` before, made `new`: two mappings are edited
/// key by key so the comments inside stay.
fn assign(
    mapping: &Mapping,
    name: &str,
    old: &Value,
    new: &Value,
    scalars: Scalars,
) -> Result<(), DocumentError> {
    if let (Value::Object(old), Value::Object(new)) = (old, new)
        && let Some(inner) = mapping.get_mapping(name)
    {
        return merge(&inner, old, new, scalars);
    }
    put(mapping, name, new, scalars)
}

fn merge(
    mapping: &Mapping,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    scalars: Scalars,
) -> Result<(), DocumentError> {
    for gone in old.keys().filter(|name| !new.contains_key(*name)) {
        mapping.remove(gone.as_str());
    }
    for (name, value) in new {
        match old.get(name) {
            Some(before) if before == value => {}
            Some(before) => assign(mapping, name, before, value, scalars)?,
            None => put(mapping, name, value, scalars)?,
        }
    }
    Ok(())
}

/// `name: value`, replacing the value in place (the key, its position and
/// its comment stay) or appended to the mapping.
fn put(
    mapping: &Mapping,
    name: &str,
    value: &Value,
    scalars: Scalars,
) -> Result<(), DocumentError> {
    let name = fragment(&Value::String(name.to_owned()), Scalars::Quoted)?;
    mapping.set(&name, &fragment(value, scalars)?);
    Ok(())
}

/// `value` as a YAML node to put in the tree, written by the serializer so
/// its quoting is the one `render` uses.
fn fragment(value: &Value, scalars: Scalars) -> Result<yaml_edit::Document, DocumentError> {
    let text = emit(value, scalars)?;
    editor(&text)?
        .document()
        .ok_or_else(|| DocumentError::new("the YAML writer wrote an empty document"))
}

fn emit(value: &Value, scalars: Scalars) -> Result<String, DocumentError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    // Long strings stay on one line: folding them (`>`) reads differently
    // from what was sent, and a reviewer should see the value as it is.
    options.folded_wrap_chars = usize::MAX;
    options.prefer_block_scalars = scalars == Scalars::Block;
    let mut text = serde_saphyr::to_string_with_options(value, options)
        .map_err(|err| DocumentError(format!("the value cannot be written as YAML: {err}")))?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// A mapping the parser sees that the editor cannot reach: an alias, a
/// merge key or a tag on the way.
fn unreachable_mapping(key: &[String]) -> DocumentError {
    DocumentError(format!(
        "{} is written as an alias, a merge or a tagged value: edit what it refers to by hand",
        dotted(key)
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{FileFormat, parse, remove_key, render, set_key, value_at};

    const YAML: FileFormat = FileFormat::Yaml;

    fn key(path: &str) -> Vec<String> {
        path.split('.').map(str::to_owned).collect()
    }

    /// Comments, three entries out of key order (one a flow list), and a
    /// mapping with comments inside.
    const WRITTEN: &str = "# Pools, one per team.\n# Ask #infra before editing.\n\nzeta: [1, 2] # inline note\n\n# about alpha\nalpha: a\npools:\n  # bob's pool\n  bob:\n    size: 2 # small\n";

    #[test]
    fn a_new_key_in_a_missing_file_is_block_style() {
        let value = json!({ "size": 3, "tags": ["a", "b"] });
        let text = set_key(YAML, None, &key("pools.alice"), &value).unwrap();
        assert_eq!(
            text,
            "pools:\n  alice:\n    size: 3\n    tags:\n    - a\n    - b\n"
        );
        assert_eq!(
            value_at(YAML, &text, &key("pools.alice")).unwrap(),
            Some(value)
        );
        assert_eq!(
            set_key(YAML, Some("# only\n"), &key("a.b"), &json!(1)).unwrap(),
            "# only\na:\n  b: 1\n"
        );
    }

    #[test]
    fn setting_a_new_key_keeps_comments_and_the_other_entries() {
        let text = set_key(
            YAML,
            Some(WRITTEN),
            &key("pools.alice"),
            &json!({ "size": 3 }),
        )
        .unwrap();
        assert_eq!(text, format!("{WRITTEN}  alice:\n    size: 3\n"));
        let text = set_key(YAML, Some(WRITTEN), &key("mid"), &json!(true)).unwrap();
        assert_eq!(text, format!("{WRITTEN}mid: true\n"));
        // Keys and strings a YAML 1.1 reader would take for booleans are quoted.
        let text = set_key(YAML, Some(WRITTEN), &key("yes"), &json!("no")).unwrap();
        assert_eq!(text, format!("{WRITTEN}\"yes\": \"no\"\n"));
    }

    #[test]
    fn replacing_an_entry_keeps_its_comments_and_place_and_resetting_changes_nothing() {
        let text = set_key(YAML, Some(WRITTEN), &key("zeta"), &json!(7.5)).unwrap();
        assert_eq!(
            text,
            WRITTEN.replace("zeta: [1, 2] # inline note", "zeta: 7.5 # inline note")
        );
        assert_eq!(
            set_key(YAML, Some(&text), &key("zeta"), &json!(7.5)).unwrap(),
            text
        );
        assert_eq!(
            set_key(YAML, Some(WRITTEN), &key("zeta"), &json!([1, 2])).unwrap(),
            WRITTEN
        );
        let text = set_key(YAML, Some(WRITTEN), &key("alpha"), &json!({ "x": 1 })).unwrap();
        assert_eq!(text, WRITTEN.replace("alpha: a\n", "alpha:\n  x: 1\n"));
        // A mapping edited key by key: the comments inside it stay.
        let text = set_key(
            YAML,
            Some(WRITTEN),
            &key("pools.bob"),
            &json!({ "size": 4, "zone": "b" }),
        )
        .unwrap();
        assert_eq!(
            text,
            WRITTEN.replace("size: 2 # small\n", "size: 4 # small\n    zone: b\n")
        );
        let quoted = "\"a\": 1\n'b': 2\n";
        assert_eq!(
            set_key(YAML, Some(quoted), &key("b"), &json!(3)).unwrap(),
            "\"a\": 1\n'b': 3\n"
        );
    }

    #[test]
    fn removing_a_key_keeps_the_others_and_an_absent_key_changes_nothing() {
        // The comment above a removed entry stays: it may be about more.
        let text = remove_key(YAML, WRITTEN, &key("alpha")).unwrap();
        assert_eq!(text, WRITTEN.replace("alpha: a\n", ""));
        let text = remove_key(YAML, WRITTEN, &key("pools.bob.size")).unwrap();
        assert_eq!(
            text,
            WRITTEN.replace("  bob:\n    size: 2 # small\n", "  bob: {}\n")
        );
        let text = remove_key(YAML, WRITTEN, &key("pools.bob")).unwrap();
        assert_eq!(
            value_at(YAML, &text, &key("pools")).unwrap(),
            Some(json!({}))
        );
        assert_eq!(remove_key(YAML, WRITTEN, &key("nope")).unwrap(), WRITTEN);
        assert_eq!(
            remove_key(YAML, WRITTEN, &key("pools.carol.size")).unwrap(),
            WRITTEN
        );
    }

    #[test]
    fn every_kind_of_value_reads_back_as_set() {
        let value = json!({
            "nested": { "deeper": { "list": [1, [2, 3], { "k": null }] } },
            "flags": [true, false],
            "int": i64::MIN,
            "big": u64::MAX,
            "float": 2.5,
            "whole_float": 3.0,
            "text": "a \"quote\": # not a comment\nsecond line, ünïcødé ✓ 'single'",
            "control": "tab\there \u{1}",
            "trailing": "blank lines\n\n",
            "look_alikes": ["yes", "n", "012", "1e3", "~", "null", "- x", "@x", "", " lead"],
            "empty": {},
            "none": [],
        });
        let text = set_key(YAML, Some(WRITTEN), &key("pools.alice"), &value).unwrap();
        assert_eq!(
            value_at(YAML, &text, &key("pools.alice")).unwrap(),
            Some(value.clone())
        );
        let text = set_key(YAML, Some(WRITTEN), &key("zeta"), &value).unwrap();
        assert_eq!(value_at(YAML, &text, &key("zeta")).unwrap(), Some(value));
        let text = set_key(YAML, Some("pools:\nother: 1\n"), &key("pools.a"), &json!(1)).unwrap();
        assert_eq!(text, "pools:\n  a: 1\nother: 1\n");
    }

    #[test]
    fn broken_yaml_aliases_and_a_value_in_the_way_are_readable_errors() {
        let err = parse(YAML, "a: b: c\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "not valid YAML: mapping values are not allowed in this context at line 1, column 5"
        );
        let err = set_key(YAML, Some("a: 1\na: 2\n"), &key("b"), &json!(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not valid YAML: duplicate mapping key `a` is not allowed here at line 2, column 1"
        );
        let err = set_key(YAML, Some("a: 1\n---\nb: 2\n"), &key("c"), &json!(1)).unwrap_err();
        assert!(err.to_string().contains("multiple found"), "{err}");
        let err = value_at(YAML, WRITTEN, &key("alpha.x")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "alpha is a string, not a mapping: it has no key \"x\""
        );
        let err = set_key(YAML, Some("- 1\n"), &key("a"), &json!(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the YAML document is a list, not a mapping: it has no key \"a\""
        );
        let anchored = "base: &b\n  x: 1\nuse: *b\n";
        let err = set_key(YAML, Some(anchored), &key("use.x"), &json!(2)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "use is written as an alias, a merge or a tagged value: edit what it refers to by hand"
        );
        let err = set_key(YAML, Some(anchored), &key("base.x"), &json!(2)).unwrap_err();
        assert!(
            err.to_string().contains("an alias may refer to it"),
            "{err}"
        );
        assert_eq!(
            set_key(YAML, Some(anchored), &key("use"), &json!({ "x": 2 })).unwrap(),
            "base: &b\n  x: 1\nuse:\n  x: 2\n"
        );
    }

    #[test]
    fn render_is_deterministic_and_parses_back() {
        let value = json!({ "b": [1, { "c": "x" }], "a": { "s": "two\nlines", "n": null, "e": {} }, "f": 1.5, "t": "yes" });
        let text = render(YAML, &value).unwrap();
        assert_eq!(
            text,
            "a:\n  e: {}\n  \"n\": null\n  s: |-\n    two\n    lines\nb:\n- 1\n- c: x\nf: 1.5\nt: \"yes\"\n"
        );
        assert_eq!(render(YAML, &value).unwrap(), text);
        assert_eq!(parse(YAML, &text).unwrap(), value);
        // A file never ends in blank lines, even for a string that does.
        assert_eq!(
            render(YAML, &json!({ "s": "x\n\n" })).unwrap(),
            "s: \"x\\n\\n\"\n"
        );
    }
}
