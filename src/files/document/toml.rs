//! TOML with `toml_edit`, the format-preserving editor cargo uses: a key's
//! comment lines and its place stay with it, and only the edited value is
//! written anew.
//!
//! An object written new under a table becomes a standard table
//! (`[pools.alice]`), the objects inside it inline tables, so the common
//! case reads like hand-written TOML. Lists are inline arrays, lists of
//! objects too: an existing array of tables (`[[pools.alice]]`) that is set
//! is written anew as one, its comments lost. TOML has no null: a null
//! anywhere is refused, naming where it is. Datetimes read as their string,
//! and a string written never becomes a datetime.

use serde_json::{Map, Number, Value};
use toml_edit::{ArrayOfTables, DocumentMut, InlineTable, Item, Table, TableLike, TomlError};

use super::{DocumentError, dotted, kind, line_column, nested};

/// The document's value.
pub(super) fn parse(text: &str) -> Result<Value, DocumentError> {
    let document = document(text)?;
    table_json(document.as_table(), &mut Vec::new())
}

/// Root values first, then one standard table per object, each in key
/// order: toml_edit's layout, the same bytes for the same value.
pub(super) fn render(value: &Value) -> Result<String, DocumentError> {
    let Value::Object(map) = value else {
        return Err(DocumentError(format!(
            "a TOML document is a table of keys, and the value is {}",
            kind(value)
        )));
    };
    refuse_nulls(value, &[])?;
    let mut document = DocumentMut::new();
    for (name, value) in map {
        document.insert(name, new_item(value, true)?);
    }
    let mut text = document.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// An error naming the first null in `value`, which would sit at `key`.
pub(super) fn refuse_nulls(value: &Value, key: &[String]) -> Result<(), DocumentError> {
    /// `step` then `rest`, as a path: `a.b`, `a[1]`.
    fn join(step: String, rest: String) -> String {
        if rest.is_empty() || rest.starts_with('[') {
            step + &rest
        } else {
            format!("{step}.{rest}")
        }
    }
    /// The path of the first null below `value`, empty for itself.
    fn null_at(value: &Value) -> Option<String> {
        match value {
            Value::Null => Some(String::new()),
            Value::Object(map) => map
                .iter()
                .find_map(|(name, child)| null_at(child).map(|rest| join(name.clone(), rest))),
            Value::Array(items) => items.iter().enumerate().find_map(|(index, child)| {
                null_at(child).map(|rest| join(format!("[{index}]"), rest))
            }),
            _ => None,
        }
    }
    let Some(rest) = null_at(value) else {
        return Ok(());
    };
    let path = match dotted(key) {
        key if key.is_empty() => rest,
        key => join(key, rest),
    };
    Err(DocumentError(format!(
        "TOML has no null, and {path} is null: leave the key out instead"
    )))
}

/// `text` with `value` at `key`; `current` is `text` parsed, whose value at
/// `key` differs and whose intermediates are tables or absent.
pub(super) fn set(
    text: &str,
    current: &Value,
    key: &[String],
    value: &Value,
) -> Result<String, DocumentError> {
    let mut document = document(text)?;
    set_in(document.as_table_mut(), true, current, key, value)?;
    Ok(document.to_string())
}

/// `text` without the value at `key`, which the caller has checked is there.
pub(super) fn remove(text: &str, key: &[String]) -> Result<String, DocumentError> {
    let mut document = document(text)?;
    remove_in(document.as_table_mut(), key);
    Ok(document.to_string())
}

fn document(text: &str) -> Result<DocumentMut, DocumentError> {
    text.parse().map_err(|err: TomlError| {
        let message = err.message().trim().replace('\n', "; ");
        match err.span() {
            Some(span) => {
                let (line, column) = line_column(text, span.start);
                DocumentError(format!(
                    "not valid TOML: {message} at line {line}, column {column}"
                ))
            }
            None => DocumentError(format!("not valid TOML: {message}")),
        }
    })
}

/// `standard`: `table` is a standard table (not inline), where an object
/// written new becomes a table of its own.
fn set_in(
    table: &mut dyn TableLike,
    standard: bool,
    old: &Value,
    key: &[String],
    value: &Value,
) -> Result<(), DocumentError> {
    let Some((first, rest)) = key.split_first() else {
        return Ok(());
    };
    let old_child = old.get(first);
    if rest.is_empty() {
        return assign(
            table,
            first,
            old_child.unwrap_or(&Value::Null),
            value,
            standard,
        );
    }
    match table.get_mut(first) {
        Some(item) if !item.is_none() => {
            let inner_standard = item.is_table();
            let Some(inner) = item.as_table_like_mut() else {
                return Err(DocumentError(format!("{first} is not a table")));
            };
            set_in(
                inner,
                inner_standard,
                old_child.unwrap_or(&Value::Null),
                rest,
                value,
            )
        }
        _ if !standard => insert_new(table, first, &nested(rest, value.clone()), false),
        _ => {
            // An implicit table: `[pools.alice]` without an empty `[pools]`.
            let mut inner = Table::new();
            inner.set_implicit(true);
            set_in(&mut inner, true, &Value::Null, rest, value)?;
            table.insert(first, Item::Table(inner));
            Ok(())
        }
    }
}

/// The value at `name`, `old` before, made `new`. Two tables are edited
/// key by key so the comments inside stay; a value keeps its place and its
/// comment.
fn assign(
    table: &mut dyn TableLike,
    name: &str,
    old: &Value,
    new: &Value,
    standard: bool,
) -> Result<(), DocumentError> {
    let Some(item) = table.get_mut(name) else {
        return insert_new(table, name, new, standard);
    };
    if let (Value::Object(old), Value::Object(new)) = (old, new) {
        let inner_standard = item.is_table();
        if let Some(inner) = item.as_table_like_mut() {
            merge(inner, inner_standard, old, new)?;
            keep_when_empty(item);
            return Ok(());
        }
    }
    match item {
        Item::Value(current) => {
            let decor = current.decor().clone();
            let mut value = value(new)?;
            *value.decor_mut() = decor;
            *current = value;
            Ok(())
        }
        Item::ArrayOfTables(_) if tables_only(new) => {
            *item = array_of_tables(new)?;
            Ok(())
        }
        // A `[table]` that becomes a value: its key was spelled for a
        // header (`bob= 1` otherwise), so it is written anew.
        _ => {
            table.remove(name);
            insert_new(table, name, new, standard)
        }
    }
}

fn merge(
    table: &mut dyn TableLike,
    standard: bool,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Result<(), DocumentError> {
    for gone in old.keys().filter(|name| !new.contains_key(*name)) {
        table.remove(gone);
    }
    for (name, value) in new {
        match old.get(name) {
            Some(before) if before == value => {}
            before => assign(table, name, before.unwrap_or(&Value::Null), value, standard)?,
        }
    }
    Ok(())
}

/// `name = value` appended to `table`.
fn insert_new(
    table: &mut dyn TableLike,
    name: &str,
    value: &Value,
    standard: bool,
) -> Result<(), DocumentError> {
    let mut item = new_item(value, standard)?;
    if !standard {
        // `{ b = 1 }` keeps the space before `}` after its last value: it
        // moves to the new last value, or the entry would read `1 , c = 2`.
        let last = table
            .iter_mut()
            .last()
            .and_then(|(_, last)| last.as_value_mut());
        if let (Some(last), Some(new)) = (last, item.as_value_mut()) {
            let blank = last
                .decor()
                .suffix()
                .and_then(|suffix| suffix.as_str())
                .map(str::to_owned);
            if let Some(blank) = blank.filter(|suffix| suffix.trim().is_empty()) {
                last.decor_mut().set_suffix("");
                new.decor_mut().set_suffix(blank);
            }
        }
    }
    table.insert(name, item);
    Ok(())
}

fn remove_in(table: &mut dyn TableLike, key: &[String]) {
    let Some((first, rest)) = key.split_first() else {
        return;
    };
    if rest.is_empty() {
        table.remove(first);
        return;
    }
    let Some(item) = table.get_mut(first) else {
        return;
    };
    if let Some(inner) = item.as_table_like_mut() {
        remove_in(inner, rest);
        keep_when_empty(item);
    }
}

/// An implicit or dotted table with no keys left is not written at all;
/// an emptied table is kept, so it gets a header of its own.
fn keep_when_empty(item: &mut Item) {
    if let Item::Table(table) = item
        && table.is_empty()
    {
        table.set_implicit(false);
        table.set_dotted(false);
    }
}

/// What `value` becomes written new: a standard table for an object under
/// a standard table, else an inline value.
fn new_item(value: &Value, standard: bool) -> Result<Item, DocumentError> {
    match value {
        Value::Object(map) if standard => {
            let mut table = Table::new();
            for (name, child) in map {
                table.insert(name, Item::Value(self::value(child)?));
            }
            Ok(Item::Table(table))
        }
        _ => Ok(Item::Value(self::value(value)?)),
    }
}

fn tables_only(value: &Value) -> bool {
    matches!(value, Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_object))
}

fn array_of_tables(value: &Value) -> Result<Item, DocumentError> {
    let mut tables = ArrayOfTables::new();
    for item in value.as_array().into_iter().flatten() {
        if let Item::Table(table) = new_item(item, true)? {
            tables.push(table);
        }
    }
    Ok(Item::ArrayOfTables(tables))
}

fn value(value: &Value) -> Result<toml_edit::Value, DocumentError> {
    Ok(match value {
        Value::Null => {
            return Err(DocumentError::new(
                "TOML has no null: leave the key out instead",
            ));
        }
        Value::Bool(flag) => (*flag).into(),
        Value::Number(number) => number_value(number)?,
        Value::String(text) => text.as_str().into(),
        Value::Array(items) => {
            let items = items
                .iter()
                .map(self::value)
                .collect::<Result<Vec<_>, _>>()?;
            toml_edit::Value::Array(items.into_iter().collect())
        }
        Value::Object(map) => {
            let mut table = InlineTable::new();
            for (name, child) in map {
                table.insert(name, self::value(child)?);
            }
            toml_edit::Value::InlineTable(table)
        }
    })
}

/// Integers stay integers and floats floats, so the file reads back the
/// same number.
fn number_value(number: &Number) -> Result<toml_edit::Value, DocumentError> {
    if let Some(integer) = number.as_i64() {
        Ok(integer.into())
    } else if number.is_u64() {
        Err(DocumentError(format!(
            "{number} is larger than a TOML integer can be (at most {})",
            i64::MAX
        )))
    } else {
        number
            .as_f64()
            .map(toml_edit::Value::from)
            .ok_or_else(|| DocumentError(format!("{number} is not a number TOML can hold")))
    }
}

fn table_json(table: &dyn TableLike, path: &mut Vec<String>) -> Result<Value, DocumentError> {
    let mut map = Map::new();
    for (name, item) in table.iter() {
        path.push(name.to_owned());
        let value = match item {
            Item::None => None,
            Item::Value(value) => Some(value_json(value, path)?),
            Item::Table(table) => Some(table_json(table, path)?),
            Item::ArrayOfTables(tables) => Some(Value::Array(
                tables
                    .iter()
                    .map(|table| table_json(table, path))
                    .collect::<Result<_, _>>()?,
            )),
        };
        path.pop();
        if let Some(value) = value {
            map.insert(name.to_owned(), value);
        }
    }
    Ok(Value::Object(map))
}

fn value_json(value: &toml_edit::Value, path: &mut Vec<String>) -> Result<Value, DocumentError> {
    Ok(match value {
        toml_edit::Value::String(text) => Value::String(text.value().clone()),
        toml_edit::Value::Integer(integer) => Value::from(*integer.value()),
        toml_edit::Value::Float(float) => match Number::from_f64(*float.value()) {
            Some(number) => Value::Number(number),
            None => {
                return Err(DocumentError(format!(
                    "{} is {}, which JSON cannot hold",
                    dotted(path),
                    float.value()
                )));
            }
        },
        toml_edit::Value::Boolean(flag) => Value::Bool(*flag.value()),
        toml_edit::Value::Datetime(datetime) => Value::String(datetime.value().to_string()),
        toml_edit::Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| value_json(item, path))
                .collect::<Result<_, _>>()?,
        ),
        toml_edit::Value::InlineTable(table) => table_json(table, path)?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{FileFormat, parse, remove_key, render, set_key, value_at};

    const TOML: FileFormat = FileFormat::Toml;

    fn key(path: &str) -> Vec<String> {
        path.split('.').map(str::to_owned).collect()
    }

    /// Comments, three entries out of key order, and a table with a
    /// comment inside.
    const WRITTEN: &str = "# Pools, one per team.\n# Ask #infra before editing.\n\nzeta = [1, 2] # inline note\n\n# about alpha\nalpha = \"a\"\n\n[pools.bob]\n# bob's size\nsize = 2\n";

    #[test]
    fn a_new_object_in_a_missing_file_is_a_standard_table() {
        let value = json!({ "size": 3, "labels": { "team": "x" } });
        let text = set_key(TOML, None, &key("pools.alice"), &value).unwrap();
        assert_eq!(text, "[pools.alice]\nlabels = { team = \"x\" }\nsize = 3\n");
        assert_eq!(
            value_at(TOML, &text, &key("pools.alice")).unwrap(),
            Some(value)
        );
        assert_eq!(
            set_key(TOML, Some(""), &key("a"), &json!(1)).unwrap(),
            "a = 1\n"
        );
    }

    #[test]
    fn setting_a_new_key_keeps_comments_and_the_other_entries() {
        let text = set_key(
            TOML,
            Some(WRITTEN),
            &key("pools.alice"),
            &json!({ "size": 3 }),
        )
        .unwrap();
        assert_eq!(text, format!("{WRITTEN}\n[pools.alice]\nsize = 3\n"));
        let text = set_key(TOML, Some(WRITTEN), &key("mid"), &json!(true)).unwrap();
        assert_eq!(
            text,
            "# Pools, one per team.\n# Ask #infra before editing.\n\nzeta = [1, 2] # inline note\n\n# about alpha\nalpha = \"a\"\nmid = true\n\n[pools.bob]\n# bob's size\nsize = 2\n"
        );
    }

    #[test]
    fn replacing_an_entry_keeps_its_comments_and_place_and_resetting_changes_nothing() {
        let text = set_key(TOML, Some(WRITTEN), &key("zeta"), &json!(7.5)).unwrap();
        assert_eq!(
            text,
            WRITTEN.replace("zeta = [1, 2] # inline note", "zeta = 7.5 # inline note")
        );
        assert_eq!(
            set_key(TOML, Some(&text), &key("zeta"), &json!(7.5)).unwrap(),
            text
        );
        let text = set_key(TOML, Some(WRITTEN), &key("alpha"), &json!({ "x": 1 })).unwrap();
        assert_eq!(text, WRITTEN.replace("alpha = \"a\"", "alpha = { x = 1 }"));
        // A table edited key by key: the comment inside it stays.
        let text = set_key(
            TOML,
            Some(WRITTEN),
            &key("pools.bob"),
            &json!({ "size": 4, "zone": "b" }),
        )
        .unwrap();
        assert_eq!(
            text,
            WRITTEN.replace("size = 2\n", "size = 4\nzone = \"b\"\n")
        );
        assert_eq!(
            set_key(
                TOML,
                Some(WRITTEN),
                &key("pools.bob"),
                &json!({ "size": 2 })
            )
            .unwrap(),
            WRITTEN
        );
    }

    #[test]
    fn removing_a_key_keeps_the_others_and_an_absent_key_changes_nothing() {
        let text = remove_key(TOML, WRITTEN, &key("alpha")).unwrap();
        assert_eq!(
            text,
            WRITTEN.replace("\n# about alpha\nalpha = \"a\"\n", "")
        );
        let text = remove_key(TOML, WRITTEN, &key("pools.bob")).unwrap();
        assert_eq!(
            value_at(TOML, &text, &key("pools")).unwrap(),
            Some(json!({}))
        );
        assert!(text.starts_with("# Pools, one per team.\n# Ask #infra before editing.\n\nzeta = [1, 2] # inline note\n"), "{text}");
        let text = remove_key(TOML, WRITTEN, &key("pools.bob.size")).unwrap();
        assert_eq!(
            value_at(TOML, &text, &key("pools.bob")).unwrap(),
            Some(json!({}))
        );
        assert_eq!(remove_key(TOML, WRITTEN, &key("nope")).unwrap(), WRITTEN);
        assert_eq!(
            remove_key(TOML, WRITTEN, &key("pools.carol.size")).unwrap(),
            WRITTEN
        );
    }

    #[test]
    fn every_kind_of_value_reads_back_as_set() {
        let value = json!({
            "nested": { "deeper": { "list": [1, [2, 3], { "k": "v" }] } },
            "flags": [true, false],
            "int": i64::MIN,
            "float": 2.5,
            "whole_float": 3.0,
            "text": "a \"quote\": # not a comment\nsecond line, ünïcødé ✓ \u{1} 'single'",
            "date_like": "1979-05-27",
            "key with spaces": "ok",
            "empty": {},
            "none": [],
        });
        let text = set_key(TOML, Some(WRITTEN), &key("pools.alice"), &value).unwrap();
        assert_eq!(
            value_at(TOML, &text, &key("pools.alice")).unwrap(),
            Some(value.clone())
        );
        let text = set_key(TOML, Some(WRITTEN), &key("zeta"), &value).unwrap();
        assert_eq!(value_at(TOML, &text, &key("zeta")).unwrap(), Some(value));
    }

    #[test]
    fn broken_toml_nulls_and_a_value_in_the_way_are_readable_errors() {
        let err = parse(TOML, "a = \n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "not valid TOML: string values must be quoted, expected literal string at line 1, column 5"
        );
        let err = set_key(TOML, Some("a = 1\na = 2\n"), &key("b"), &json!(1)).unwrap_err();
        assert!(err.to_string().starts_with("not valid TOML: "), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
        let err = value_at(TOML, WRITTEN, &key("alpha.x")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "alpha is a string, not a table: it has no key \"x\""
        );
        let err = set_key(TOML, Some(WRITTEN), &key("pools.bob.size.x"), &json!(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "pools.bob.size is a number, not a table: it has no key \"x\""
        );
        let err = set_key(
            TOML,
            None,
            &key("pools.alice"),
            &json!({ "tags": ["a", null] }),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "TOML has no null, and pools.alice.tags[1] is null: leave the key out instead"
        );
        let err = set_key(TOML, None, &key("a"), &json!(u64::MAX)).unwrap_err();
        assert!(
            err.to_string().contains("larger than a TOML integer"),
            "{err}"
        );
    }

    #[test]
    fn render_is_deterministic_parses_back_and_names_a_null() {
        let value =
            json!({ "z": 1, "b": { "c": [1, 2], "d": { "e": "x" } }, "a": 1.5, "s": "q\"" });
        let text = render(TOML, &value).unwrap();
        assert_eq!(
            text,
            "a = 1.5\ns = 'q\"'\nz = 1\n\n[b]\nc = [1, 2]\nd = { e = \"x\" }\n"
        );
        assert_eq!(render(TOML, &value).unwrap(), text);
        assert_eq!(parse(TOML, &text).unwrap(), value);
        let err = render(TOML, &json!({ "a": { "b": null } })).unwrap_err();
        assert_eq!(
            err.to_string(),
            "TOML has no null, and a.b is null: leave the key out instead"
        );
        let err = render(TOML, &json!([1])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a TOML document is a table of keys, and the value is a list"
        );
        assert_eq!(render(TOML, &json!({})).unwrap(), "\n");
    }
}
