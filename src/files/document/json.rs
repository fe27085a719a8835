//! JSON: values read with serde_json, edits made in the file's own text with
//! `jsonc-parser`'s CST (dprint's and Deno's parser), which keeps every byte
//! it is not asked to change: the other entries' order, spacing and
//! indentation. serde_json's `preserve_order` is not an option: it would
//! change the key order of every `json!` in the crate, and the request
//! hashes computed from them.
//!
//! A value written new takes the file's indentation (two spaces in what
//! [`render`] writes) and, like `serde_json::to_string_pretty`, puts each
//! element of a list on its own line. A one-line object that gains a key
//! is spread over lines (the CST's rule); its entries keep their spelling.

use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstNode, CstObject, CstObjectProp, CstRootNode};
use serde_json::{Map, Value};

use super::{DocumentError, nested};

/// The document's value; JSON as RFC 8259 has it (no comments).
pub(super) fn parse(text: &str) -> Result<Value, DocumentError> {
    if text.trim().is_empty() {
        return Err(DocumentError::new(
            "not valid JSON: the file is empty (an empty document is {})",
        ));
    }
    serde_json::from_str(text).map_err(|err| DocumentError(format!("not valid JSON: {err}")))
}

/// Two-space pretty JSON and one newline: what changegate always wrote.
pub(super) fn render(value: &Value) -> Result<String, DocumentError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|err| DocumentError(format!("the value cannot be written as JSON: {err}")))?;
    Ok(text + "\n")
}

/// `text` with `value` at `key`; `current` is `text` parsed, whose root
/// the caller has checked is an object and whose value at `key` differs.
pub(super) fn set(
    text: &str,
    current: &Value,
    key: &[String],
    value: &Value,
) -> Result<String, DocumentError> {
    let root = cst(text)?;
    let mut object = root_object(&root)?;
    let mut old = current;
    for (depth, segment) in key.iter().enumerate() {
        let rest = &key[depth + 1..];
        let Some(prop) = object.get(segment) else {
            append(&object, segment, &nested(rest, value.clone()));
            break;
        };
        let old_child = old.get(segment).unwrap_or(&Value::Null);
        if rest.is_empty() {
            assign(&prop, old_child, value);
            break;
        }
        match prop.object_value() {
            Some(inner) => {
                object = inner;
                old = old_child;
            }
            // A null on the way (checked by the caller): the rest goes there.
            None => {
                replace(&prop, &nested(rest, value.clone()));
                break;
            }
        }
    }
    Ok(root.to_string())
}

/// `text` without the value at `key`, which the caller has checked is there.
pub(super) fn remove(text: &str, key: &[String]) -> Result<String, DocumentError> {
    let root = cst(text)?;
    let mut object = root_object(&root)?;
    let Some((last, parents)) = key.split_last() else {
        return Ok(text.to_owned());
    };
    for segment in parents {
        match object.object_value(segment) {
            Some(inner) => object = inner,
            None => return Ok(text.to_owned()),
        }
    }
    if let Some(prop) = object.get(last) {
        prop.remove();
    }
    Ok(root.to_string())
}

/// The CST of a text serde_json has already accepted.
fn cst(text: &str) -> Result<CstRootNode, DocumentError> {
    // Strict, as serde_json read it: the CST must see the same document.
    let options = ParseOptions {
        allow_comments: false,
        allow_loose_object_property_names: false,
        allow_trailing_commas: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    CstRootNode::parse(text, &options)
        .map_err(|err| DocumentError(format!("not valid JSON: {err}")))
}

fn root_object(root: &CstRootNode) -> Result<CstObject, DocumentError> {
    root.object_value().ok_or_else(|| {
        DocumentError::new("the JSON document is not an object: it has no keys to edit")
    })
}

/// The value of an existing `prop`, `old` before, made `new`: two objects
/// are edited key by key so what is written inside the old one stays.
fn assign(prop: &CstObjectProp, old: &Value, new: &Value) {
    match (prop.object_value(), old, new) {
        (Some(object), Value::Object(old), Value::Object(new)) => merge(&object, old, new),
        _ => replace(prop, new),
    }
}

fn merge(object: &CstObject, old: &Map<String, Value>, new: &Map<String, Value>) {
    for gone in old.keys().filter(|name| !new.contains_key(*name)) {
        if let Some(prop) = object.get(gone) {
            prop.remove();
        }
    }
    for (name, value) in new {
        match (object.get(name), old.get(name)) {
            (_, Some(before)) if before == value => {}
            (Some(prop), before) => assign(&prop, before.unwrap_or(&Value::Null), value),
            (None, _) => append(object, name, value),
        }
    }
}

fn replace(prop: &CstObjectProp, value: &Value) {
    prop.set_value(input(value));
    if let Some(node) = prop.value() {
        lists_multiline(&node);
    }
}

fn append(object: &CstObject, name: &str, value: &Value) {
    if let Some(node) = object.append(name, input(value)).value() {
        lists_multiline(&node);
    }
}

/// Each element of a written list on its own line, as serde_json's pretty
/// printer does (the CST keeps short lists on one line).
fn lists_multiline(node: &CstNode) {
    if let Some(array) = node.as_array() {
        let elements = array.elements();
        if !elements.is_empty() {
            array.ensure_multiline();
        }
        elements.iter().for_each(lists_multiline);
    } else if let Some(object) = node.as_object() {
        for prop in object.properties() {
            if let Some(value) = prop.value() {
                lists_multiline(&value);
            }
        }
    }
}

fn input(value: &Value) -> CstInputValue {
    match value {
        Value::Null => CstInputValue::Null,
        Value::Bool(flag) => CstInputValue::Bool(*flag),
        // serde_json's own spelling: integers stay integers, floats keep a
        // fraction or an exponent, so the file reads back the same number.
        Value::Number(number) => CstInputValue::Number(number.to_string()),
        Value::String(text) => CstInputValue::String(text.clone()),
        Value::Array(items) => CstInputValue::Array(items.iter().map(input).collect()),
        Value::Object(map) => CstInputValue::Object(
            map.iter()
                .map(|(name, value)| (name.clone(), input(value)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{FileFormat, parse, remove_key, render, set_key, value_at};

    const JSON: FileFormat = FileFormat::Json;

    fn key(path: &str) -> Vec<String> {
        path.split('.').map(str::to_owned).collect()
    }

    /// Three entries out of key order, one-line lists and a file without a
    /// final newline: what a person may have written.
    const WRITTEN: &str =
        "{\n  \"zeta\": [1, 2],\n  \"alpha\": {\"on\": true},\n  \"mid\": \"x\"\n}";

    #[test]
    fn a_new_key_in_a_missing_file_is_the_pretty_document() {
        let value = json!({ "size": 3, "tags": ["a"] });
        let text = set_key(JSON, None, &key("pools.alice"), &value).unwrap();
        assert_eq!(
            text,
            "{\n  \"pools\": {\n    \"alice\": {\n      \"size\": 3,\n      \"tags\": [\n        \"a\"\n      ]\n    }\n  }\n}\n"
        );
        assert_eq!(
            value_at(JSON, &text, &key("pools.alice")).unwrap(),
            Some(value)
        );
        assert_eq!(
            set_key(JSON, Some("  \n"), &key("pools.alice"), &json!(1)).unwrap(),
            "{\n  \"pools\": {\n    \"alice\": 1\n  }\n}\n"
        );
    }

    #[test]
    fn setting_a_new_key_keeps_the_other_entries_as_written() {
        let text = set_key(JSON, Some(WRITTEN), &key("beta"), &json!({ "n": [1, 2] })).unwrap();
        assert_eq!(
            text,
            "{\n  \"zeta\": [1, 2],\n  \"alpha\": {\"on\": true},\n  \"mid\": \"x\",\n  \"beta\": {\n    \"n\": [\n      1,\n      2\n    ]\n  }\n}"
        );
        let four = "{\n    \"a\": 1\n}\n";
        assert_eq!(
            set_key(JSON, Some(four), &key("b.c"), &json!(2)).unwrap(),
            "{\n    \"a\": 1,\n    \"b\": {\n        \"c\": 2\n    }\n}\n"
        );
    }

    #[test]
    fn replacing_an_entry_keeps_its_place_and_resetting_it_changes_nothing() {
        let text = set_key(JSON, Some(WRITTEN), &key("zeta"), &json!("z")).unwrap();
        assert_eq!(
            text,
            "{\n  \"zeta\": \"z\",\n  \"alpha\": {\"on\": true},\n  \"mid\": \"x\"\n}"
        );
        assert_eq!(
            set_key(JSON, Some(&text), &key("zeta"), &json!("z")).unwrap(),
            text
        );
        assert_eq!(
            set_key(JSON, Some(WRITTEN), &key("zeta"), &json!([1, 2])).unwrap(),
            WRITTEN
        );
        // An object edited key by key: the untouched entry keeps its
        // spelling; the CST writes an object that gains a key on lines.
        let nested = "{\n  \"p\": {\"keep\": [1,2], \"old\": 1}\n}\n";
        assert_eq!(
            set_key(
                JSON,
                Some(nested),
                &key("p"),
                &json!({ "keep": [1, 2], "new": true })
            )
            .unwrap(),
            "{\n  \"p\": {\n    \"keep\": [1,2],\n    \"new\": true\n  }\n}\n"
        );
    }

    #[test]
    fn removing_a_key_keeps_the_others_and_an_absent_key_changes_nothing() {
        assert_eq!(
            remove_key(JSON, WRITTEN, &key("alpha")).unwrap(),
            "{\n  \"zeta\": [1, 2],\n  \"mid\": \"x\"\n}"
        );
        assert_eq!(
            remove_key(JSON, WRITTEN, &key("alpha.on")).unwrap(),
            "{\n  \"zeta\": [1, 2],\n  \"alpha\": {},\n  \"mid\": \"x\"\n}"
        );
        assert_eq!(remove_key(JSON, WRITTEN, &key("nope")).unwrap(), WRITTEN);
        assert_eq!(
            remove_key(JSON, WRITTEN, &key("nope.deeper")).unwrap(),
            WRITTEN
        );
    }

    #[test]
    fn every_kind_of_value_reads_back_as_set() {
        let value = json!({
            "nested": { "deeper": { "list": [1, [2, 3], { "k": null }] } },
            "flags": [true, false],
            "int": -42,
            "big": u64::MAX,
            "float": 2.5,
            "whole_float": 3.0,
            "text": "a \"quote\": # not a comment\nsecond line, ünïcødé ✓ \u{1}",
            "empty": {},
            "none": [],
        });
        let text = set_key(JSON, Some(WRITTEN), &key("mid"), &value).unwrap();
        assert_eq!(
            value_at(JSON, &text, &key("mid")).unwrap(),
            Some(value.clone())
        );
        let fresh = set_key(JSON, None, &key("a.b"), &value).unwrap();
        assert_eq!(value_at(JSON, &fresh, &key("a.b")).unwrap(), Some(value));
    }

    #[test]
    fn broken_json_and_a_value_in_the_way_are_readable_errors() {
        let err = parse(JSON, "{\"a\": 1,}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "not valid JSON: trailing comma at line 1 column 9"
        );
        let err = parse(JSON, "{\"a\": 1 // note\n}").unwrap_err();
        assert!(err.to_string().starts_with("not valid JSON: "), "{err}");
        assert!(err.to_string().contains("line 1"), "{err}");
        let err = set_key(JSON, Some("{\"a\": [1"), &key("a"), &json!(1)).unwrap_err();
        assert!(err.to_string().starts_with("not valid JSON: "), "{err}");
        let err = value_at(JSON, WRITTEN, &key("mid.x")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "mid is a string, not an object: it has no key \"x\""
        );
        let err = set_key(JSON, Some(WRITTEN), &key("zeta.x"), &json!(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "zeta is a list, not an object: it has no key \"x\""
        );
        let err = set_key(JSON, Some("[1]"), &key("a"), &json!(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the JSON document is a list, not an object: it has no key \"a\""
        );
    }

    #[test]
    fn render_is_pretty_deterministic_and_parses_back() {
        let value = json!({ "b": [1, { "c": "x" }], "a": { "s": "q\"", "n": null }, "f": 1.5 });
        let text = render(JSON, &value).unwrap();
        assert_eq!(
            text,
            format!("{}\n", serde_json::to_string_pretty(&value).unwrap())
        );
        assert_eq!(render(JSON, &value).unwrap(), text);
        assert!(text.ends_with("}\n") && !text.ends_with("\n\n"));
        assert_eq!(parse(JSON, &text).unwrap(), value);
    }
}
