//! The target catalog, `[targets."<key>"]`: who may apply, what parameters
//! a request carries (a JSON Schema), and where and how its binding is
//! written (a file per binding, from a template in the repository's format,
//! or one key of a shared file).

use std::collections::BTreeMap;
use std::path::Path;

use toml::Value;

use super::reader::Reader;
use super::resolve;
use super::windows::Windows;
use crate::files::document::FileFormat;
use crate::files::layout::Layout;
use crate::files::params::ParamsSchema;
use crate::files::template::{FileTemplate, TemplateContext};

/// One entry of the target catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSettings {
    /// `description`, shown in the SPA.
    pub description: String,
    /// `project`: GitLab project id or path; empty means `gitlab.project`.
    pub project: String,
    /// `rule_codes`: any of these lets a caller apply for this target.
    pub rule_codes: Vec<String>,
    /// `self_only` (default true): the subject must be the requester's own
    /// identity, unless the requester is an operator.
    pub self_only: bool,
    /// `params_schema` (or `params_schema_file`): what a request's
    /// parameters must be; `params` (names only): these string parameters.
    pub params: ParamsSchema,
    /// `path`, `format`, `template` and `edit`: where the binding is
    /// written and what it says.
    pub layout: Layout,
    /// `windows`: the change windows (`[windows.<name>]`) its requests
    /// merge in; none: any time. A name `[windows]` lacks keeps the target
    /// from merging until the configuration is fixed.
    pub windows: Vec<String>,
    /// `revert_requires_approval` (default true): a revert of one of its
    /// changes goes through the approvals a new request meets.
    pub revert_requires_approval: bool,
}

const TARGET_KEYS: &[&str] = &[
    "description",
    "project",
    "path",
    "rule_codes",
    "self_only",
    "params",
    "params_schema",
    "params_schema_file",
    "format",
    "template",
    "edit",
    "windows",
    "revert_requires_approval",
];

pub(super) fn targets(r: &mut Reader<'_>, windows: &Windows) -> BTreeMap<String, TargetSettings> {
    let mut catalog = BTreeMap::new();
    let Some(Value::Table(table)) = r.at(&["targets"]) else {
        return catalog;
    };
    for (key, value) in table {
        let name = format!("targets.{key}");
        r.check_keys(&name, value, Some(TARGET_KEYS));
        let params = params_schema(r, key);
        let layout = layout(r, key);
        tried(r, key, &params, &layout);
        let target = TargetSettings {
            description: r.string_at(&["targets", key, "description"], ""),
            project: r.string_at(&["targets", key, "project"], ""),
            rule_codes: r.string_list_at(&["targets", key, "rule_codes"]),
            self_only: r.bool_at(&["targets", key, "self_only"], true),
            params,
            layout,
            windows: required_windows(r, key, windows),
            revert_requires_approval: r.resolved(
                &format!("targets.{key}.revert_requires_approval"),
                resolve::flag(r.at(&["targets", key, "revert_requires_approval"]), true),
            ),
        };
        catalog.insert(key.clone(), target);
    }
    overlapping_edits(r, &catalog);
    catalog
}

/// `targets.<key>.windows`: each name `[windows]` lacks is a warning; it
/// stays in the list, where [`Windows::opening`] answers never for it.
fn required_windows(r: &mut Reader<'_>, key: &str, windows: &Windows) -> Vec<String> {
    let names = r.string_list_at(&["targets", key, "windows"]);
    for name in &names {
        if windows.get(name).is_none() {
            r.warning(
                &format!("targets.{key}.windows"),
                format!("{name:?} is not a [windows] entry; the target never merges"),
            );
        }
    }
    names
}

/// Two targets whose keys in one shared file can meet (one the same as or
/// inside the other, `{subject}` matching any name) would overwrite or
/// remove each other's entries: an error on the later one.
fn overlapping_edits(r: &mut Reader<'_>, catalog: &BTreeMap<String, TargetSettings>) {
    let edits: Vec<(&String, &String, &Vec<String>)> = catalog
        .iter()
        .filter_map(|(name, target)| match &target.layout {
            Layout::SharedKey { file, key, .. } => Some((name, file, key)),
            Layout::FilePerBinding { .. } => None,
        })
        .collect();
    for (at, (name, file, key)) in edits.iter().enumerate() {
        if let Some((other, ..)) = edits[..at]
            .iter()
            .find(|(_, other_file, other_key)| other_file == file && keys_meet(key, other_key))
        {
            r.error(
                &format!("targets.{name}.edit.key"),
                format!(
                    "can meet targets.{other}'s key in {file}: one would overwrite or remove the other's entries"
                ),
            );
        }
    }
}

/// Whether two key templates can name the same entry, or one an entry
/// inside the other's.
fn keys_meet(a: &[String], b: &[String]) -> bool {
    let placeholder = |segment: &str| segment.contains('{');
    a.iter()
        .zip(b)
        .all(|(x, y)| x == y || placeholder(x) || placeholder(y))
}

/// The schema from `params_schema`, `params_schema_file` or `params`, at
/// most one of them; a schema that cannot be used is an error naming the
/// key, and the target takes no parameters until it is fixed.
fn params_schema(r: &mut Reader<'_>, key: &str) -> ParamsSchema {
    let inline = r.at(&["targets", key, "params_schema"]);
    let file = r.at(&["targets", key, "params_schema_file"]);
    let names = r.at(&["targets", key, "params"]).is_some();
    let given = [inline.is_some(), file.is_some(), names];
    let none = ParamsSchema::of_names(&[]);
    if given.iter().filter(|given| **given).count() > 1 {
        r.error(
            &format!("targets.{key}"),
            "give one of params, params_schema and params_schema_file",
        );
        return none;
    }
    let (schema_key, schema) = match (inline, file) {
        (Some(table), _) => (
            format!("targets.{key}.params_schema"),
            serde_json::to_value(table).map_err(|err| err.to_string()),
        ),
        (None, Some(Value::String(path))) => (
            format!("targets.{key}.params_schema_file"),
            schema_file(Path::new(path)),
        ),
        (None, Some(_)) => {
            r.error(
                &format!("targets.{key}.params_schema_file"),
                "must be a path",
            );
            return none;
        }
        (None, None) => {
            return ParamsSchema::of_names(&r.string_list_at(&["targets", key, "params"]));
        }
    };
    match schema.and_then(ParamsSchema::compile) {
        Ok(schema) => schema,
        Err(message) => {
            r.error(&schema_key, message);
            none
        }
    }
}

/// A schema file: JSON when it ends in `.json`, else TOML. The path is
/// relative to the configuration file (made so when the file is loaded).
fn schema_file(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    if path.extension().is_some_and(|ext| ext == "json") {
        serde_json::from_str(&text).map_err(|err| format!("{}: {err}", path.display()))
    } else {
        let table: toml::Table = text
            .parse()
            .map_err(|err: toml::de::Error| format!("{}: {}", path.display(), err.message()))?;
        serde_json::to_value(table).map_err(|err| err.to_string())
    }
}

/// The layout from `path`, `format`, `template` and `edit`. `format`
/// defaults to what the file's extension says, else JSON.
fn layout(r: &mut Reader<'_>, key: &str) -> Layout {
    let name = format!("targets.{key}");
    let format_name = r.string_at(&["targets", key, "format"], "");
    let format = if format_name.is_empty() {
        None
    } else {
        let format = FileFormat::from_name(&format_name);
        if format.is_none() {
            r.error(
                &format!("{name}.format"),
                format!("{format_name:?} is not json, yaml or toml"),
            );
        }
        format
    };
    let template = match r.at(&["targets", key, "template"]) {
        None => None,
        Some(Value::String(source)) => match FileTemplate::compile(source) {
            Ok(template) => Some(template),
            Err(message) => {
                r.error(&format!("{name}.template"), message);
                None
            }
        },
        Some(_) => {
            r.error(&format!("{name}.template"), "must be a string");
            None
        }
    };
    if let Some(edit) = r.at(&["targets", key, "edit"]) {
        return shared_key(r, key, edit, format, template.is_some());
    }
    let path = r.string_at(
        &["targets", key, "path"],
        "bindings/{target}/{subject}.json",
    );
    if !path.contains("{subject}") {
        r.error(
            &format!("{name}.path"),
            "must contain {subject}, one file per binding",
        );
    }
    let format = format
        .or_else(|| FileFormat::of_path(&path))
        .unwrap_or(FileFormat::Json);
    Layout::FilePerBinding {
        path,
        format,
        template,
    }
}

/// `edit = { file, key }`: the binding is one key of a shared file.
fn shared_key(
    r: &mut Reader<'_>,
    key: &str,
    edit: &Value,
    format: Option<FileFormat>,
    templated: bool,
) -> Layout {
    let name = format!("targets.{key}.edit");
    r.check_keys(&name, edit, Some(&["file", "key"]));
    if templated {
        r.error(
            &format!("targets.{key}"),
            "give template or edit, not both: an edit writes the parameters at its key",
        );
    }
    if r.at(&["targets", key, "path"]).is_some() {
        r.error(
            &format!("targets.{key}.path"),
            "an edit's file is edit.file; path is for a file per binding",
        );
    }
    let file = r.string_at(&["targets", key, "edit", "file"], "");
    let key_template = r.string_at(&["targets", key, "edit", "key"], "");
    let segments: Vec<String> = key_template.split('.').map(str::to_owned).collect();
    if file.is_empty() || file.contains("{subject}") {
        r.error(
            &format!("{name}.file"),
            "must name the shared file (it may contain {target}, not {subject})",
        );
    }
    if segments.iter().any(String::is_empty) || !key_template.contains("{subject}") {
        r.error(
            &format!("{name}.key"),
            "must be a dotted key containing {subject}, like \"pools.{subject}\"",
        );
    }
    let format = format.or_else(|| FileFormat::of_path(&file));
    if format.is_none() {
        r.error(
            &format!("targets.{key}.format"),
            "must be json, yaml or toml: the edit's file does not say it by its extension",
        );
    }
    Layout::SharedKey {
        file,
        key: segments,
        format: format.unwrap_or(FileFormat::Json),
    }
}

/// The layout tried with example parameters of the schema: a template that
/// fails or writes a file that does not parse is a configuration error, not
/// a request refused later.
fn tried(r: &mut Reader<'_>, key: &str, params: &ParamsSchema, layout: &Layout) {
    // The smallest request (defaults, and the required parameters only)
    // and the fullest (every parameter): a template that names an optional
    // parameter without a default must not fail when it is left out.
    for example in [params.minimal(), params.example()] {
        if !tried_with(r, key, layout, &example) {
            return;
        }
    }
}

/// `layout` tried with `example`; false after reporting its failure.
fn tried_with(r: &mut Reader<'_>, key: &str, layout: &Layout, example: &serde_json::Value) -> bool {
    let binding = TemplateContext {
        subject: "example",
        target: key,
        params: example,
        expires_at: None,
        operation_id: "00000000-0000-4000-8000-000000000000",
        requested_by: "example",
    };
    if let Err(message) = layout.write(&binding) {
        let at = match layout {
            Layout::FilePerBinding {
                template: Some(_), ..
            } => "template",
            Layout::FilePerBinding { .. } => "format",
            Layout::SharedKey { .. } => "edit",
        };
        r.error(
            &format!("targets.{key}.{at}"),
            format!("with the example parameters {example}: {message}"),
        );
        return false;
    }
    true
}

/// Makes every relative `params_schema_file` relative to `base`, the
/// configuration file's directory, as people expect of a path written in
/// a file (the process may run from anywhere).
pub(super) fn anchor_schema_files(table: &mut toml::Table, base: &Path) {
    let Some(Value::Table(targets)) = table.get_mut("targets") else {
        return;
    };
    for (_, target) in targets.iter_mut() {
        if let Some(Value::String(path)) = target
            .as_table_mut()
            .and_then(|t| t.get_mut("params_schema_file"))
            && Path::new(path.as_str()).is_relative()
        {
            let anchored = base.join(path.as_str()).display().to_string();
            *path = anchored;
        }
    }
}

#[cfg(test)]
#[path = "targets_tests.rs"]
mod tests;
