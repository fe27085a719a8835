//! A target's parameters as a JSON Schema (draft 2020-12, with the
//! `jsonschema` crate): checked on submit and preview, defaults applied
//! before anything is rendered, every failure naming its field.

use std::fmt;
use std::sync::Arc;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use serde_json::{Map, Value, json};

/// One parameter that is not as the schema says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FieldError {
    /// The field, from the request body's root: `params.max_connections`.
    #[schema(examples("params.max_connections"))]
    pub field: String,
    /// What is wrong, in words a requester can act on.
    #[schema(examples("must be at most 500"))]
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field `{}`: {}", self.field, self.message)
    }
}

/// A target's parameter schema, compiled once when the configuration loads.
#[derive(Clone)]
pub struct ParamsSchema {
    schema: Value,
    validator: Arc<Validator>,
}

impl fmt::Debug for ParamsSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ParamsSchema").field(&self.schema).finish()
    }
}

/// Two schemas are the same when they say the same: a reload that changes
/// nothing keeps its targets equal.
impl PartialEq for ParamsSchema {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

/// The most parameters a request's schema may declare: the form shows each.
const MAX_PROPERTIES: usize = 64;

impl ParamsSchema {
    /// `schema` compiled, or why it cannot be a target's parameter schema:
    /// not a valid draft 2020-12 schema, or not one for an object with
    /// `properties` (a request's `params` is always an object, and a form
    /// is built from its properties).
    pub fn compile(schema: Value) -> Result<Self, String> {
        let Value::Object(root) = &schema else {
            return Err("must be a table (a JSON Schema object)".to_owned());
        };
        if root.get("type") != Some(&json!("object")) {
            return Err("must say type = \"object\": a request's params are an object".to_owned());
        }
        let properties = match root.get("properties") {
            None => 0,
            Some(Value::Object(properties)) => properties.len(),
            Some(_) => return Err("`properties` must be a table".to_owned()),
        };
        if properties > MAX_PROPERTIES {
            return Err(format!(
                "declares {properties} properties; at most {MAX_PROPERTIES}"
            ));
        }
        let validator = jsonschema::draft202012::new(&schema)
            .map_err(|err| format!("is not a valid JSON Schema: {err}"))?;
        let compiled = Self {
            schema,
            validator: Arc::new(validator),
        };
        if let Err(errors) = compiled.check(&json!({})).map(drop) {
            // Only `required` may refuse an empty request: a default that
            // breaks its own property's rules is the schema's mistake.
            if let Some(broken) = errors.iter().find(|e| e.message != REQUIRED) {
                return Err(format!("its defaults do not pass it: {broken}"));
            }
        }
        Ok(compiled)
    }

    /// The schema of a target that only names its parameters: each an
    /// optional string, nothing else allowed.
    pub fn of_names(names: &[String]) -> Self {
        let properties: Map<String, Value> = names
            .iter()
            .map(|name| (name.clone(), json!({ "type": "string" })))
            .collect();
        Self::compile(json!({
            "type": "object",
            "properties": properties,
            "additionalProperties": false,
        }))
        .expect("a schema of string properties is valid")
    }

    /// The schema as configured, for clients to build their forms from.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The declared parameter names, in the schema's order.
    pub fn names(&self) -> Vec<String> {
        match self.schema.get("properties") {
            Some(Value::Object(properties)) => properties.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Parameters to try a template with when the configuration loads:
    /// every default, and for a property without one a value of its kind
    /// (its first `enum` option, its `minimum`, a sample string), so a
    /// template that names any declared parameter renders.
    pub fn example(&self) -> Value {
        example_of(&self.schema)
    }

    /// The smallest request the schema admits, for trying a template with:
    /// the defaults, and a value of its kind for each required parameter
    /// without one; optional parameters without a default are left out.
    pub fn minimal(&self) -> Value {
        let mut value = json!({});
        fill_defaults(&self.schema, &mut value);
        if let (
            Some(Value::Array(required)),
            Some(Value::Object(properties)),
            Value::Object(fields),
        ) = (
            self.schema.get("required"),
            self.schema.get("properties"),
            &mut value,
        ) {
            for name in required.iter().filter_map(Value::as_str) {
                if !fields.contains_key(name) {
                    let example = properties.get(name).map_or(json!("example"), example_of);
                    fields.insert(name.to_owned(), example);
                }
            }
        }
        value
    }

    /// `params` with the schema's defaults filled in, when it passes the
    /// schema; else every failure, each naming its field.
    pub fn check(&self, params: &Value) -> Result<Value, Vec<FieldError>> {
        let mut filled = params.clone();
        fill_defaults(&self.schema, &mut filled);
        let errors: Vec<FieldError> = self
            .validator
            .iter_errors(&filled)
            .flat_map(|error| field_errors(&error))
            .collect();
        if errors.is_empty() {
            Ok(filled)
        } else {
            Err(errors)
        }
    }
}

/// Each property missing from `value` that declares a `default` gets it,
/// and so on into nested object properties, so what is rendered and stored
/// says every value, not only those the requester typed.
fn fill_defaults(schema: &Value, value: &mut Value) {
    let (Some(Value::Object(properties)), Value::Object(fields)) =
        (schema.get("properties"), &mut *value)
    else {
        return;
    };
    for (name, property) in properties {
        if !fields.contains_key(name)
            && let Some(default) = property.get("default")
        {
            fields.insert(name.clone(), default.clone());
        }
        if let Some(field) = fields.get_mut(name) {
            fill_defaults(property, field);
        }
    }
}

fn example_of(schema: &Value) -> Value {
    if let Some(default) = schema.get("default") {
        return default.clone();
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && let Some(first) = options.first()
    {
        return first.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::Array(kinds)) => kinds.first().and_then(Value::as_str),
        other => other.and_then(Value::as_str),
    };
    let bound = schema.get("minimum").or_else(|| schema.get("maximum"));
    match kind {
        Some("object") => {
            let fields: Map<String, Value> = match schema.get("properties") {
                Some(Value::Object(properties)) => properties
                    .iter()
                    .map(|(name, property)| (name.clone(), example_of(property)))
                    .collect(),
                _ => Map::new(),
            };
            Value::Object(fields)
        }
        Some("integer") => bound.cloned().unwrap_or(json!(1)),
        Some("number") => bound.cloned().unwrap_or(json!(1.5)),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("null") => Value::Null,
        _ => json!("example"),
    }
}

const REQUIRED: &str = "is required";

/// What one validation error says, as field errors (`additionalProperties`
/// names each unexpected field on its own).
fn field_errors(error: &ValidationError<'_>) -> Vec<FieldError> {
    let at: Vec<String> = error
        .instance_path()
        .segments()
        .map(|segment| segment.to_string())
        .collect();
    let field = |extra: Option<&str>| {
        std::iter::once("params")
            .chain(at.iter().map(String::as_str))
            .chain(extra)
            .collect::<Vec<_>>()
            .join(".")
    };
    let one = |message: String| {
        vec![FieldError {
            field: field(None),
            message,
        }]
    };
    match error.kind() {
        ValidationErrorKind::Required { property } => vec![FieldError {
            field: field(Some(property.as_str().unwrap_or_default())),
            message: REQUIRED.to_owned(),
        }],
        ValidationErrorKind::AdditionalProperties { unexpected } => unexpected
            .iter()
            .map(|name| FieldError {
                field: field(Some(&name.chars().take(64).collect::<String>())),
                message: "not a parameter of this target".to_owned(),
            })
            .collect(),
        ValidationErrorKind::Maximum { limit } => one(format!("must be at most {limit}")),
        ValidationErrorKind::Minimum { limit } => one(format!("must be at least {limit}")),
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            one(format!("must be less than {limit}"))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            one(format!("must be more than {limit}"))
        }
        ValidationErrorKind::MaxLength { limit } => {
            one(format!("must be at most {limit} characters"))
        }
        ValidationErrorKind::MinLength { limit } => {
            one(format!("must be at least {limit} characters"))
        }
        ValidationErrorKind::Pattern { pattern } => {
            one(format!("must match the pattern {pattern}"))
        }
        ValidationErrorKind::Enum { options } => {
            one(format!("must be one of: {}", listed(options)))
        }
        ValidationErrorKind::Constant { expected_value } => {
            one(format!("must be {expected_value}"))
        }
        ValidationErrorKind::Type { kind } => one(format!("must be {}", type_words(kind))),
        ValidationErrorKind::MaxItems { limit } => one(format!("must have at most {limit} items")),
        ValidationErrorKind::MinItems { limit } => one(format!("must have at least {limit} items")),
        ValidationErrorKind::UniqueItems => one("must not repeat an item".to_owned()),
        // Anything rarer keeps the validator's own words.
        _ => one(error.to_string()),
    }
}

/// An `enum`'s options as a requester reads them: strings bare.
fn listed(options: &Value) -> String {
    match options {
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

fn type_words(kind: &TypeKind) -> String {
    let word = |name: &str| match name {
        "integer" => "a whole number".to_owned(),
        "number" => "a number".to_owned(),
        "string" => "a string".to_owned(),
        "boolean" => "true or false".to_owned(),
        "object" => "an object".to_owned(),
        "array" => "a list".to_owned(),
        "null" => "null".to_owned(),
        other => other.to_owned(),
    };
    match kind {
        TypeKind::Single(single) => word(&single.to_string()),
        TypeKind::Multiple(set) => set
            .iter()
            .map(|t| word(&t.to_string()))
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools() -> ParamsSchema {
        ParamsSchema::compile(json!({
            "type": "object",
            "required": ["max_connections"],
            "additionalProperties": false,
            "properties": {
                "max_connections": { "type": "integer", "minimum": 1, "maximum": 500, "default": 20 },
                "mode": { "type": "string", "enum": ["read", "read-write"], "default": "read" },
                "owner": { "type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 8 },
                "ratio": { "type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1 },
                "tls": { "type": "boolean" },
                "limits": {
                    "type": "object",
                    "properties": { "burst": { "type": "integer", "default": 5 } }
                }
            }
        }))
        .expect("a valid schema")
    }

    fn failures(params: Value) -> Vec<String> {
        pools()
            .check(&params)
            .expect_err("refused")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn defaults_are_filled_in_before_anything_else_sees_the_params() {
        let filled = pools().check(&json!({ "limits": {} })).expect("valid");
        assert_eq!(
            filled,
            json!({ "max_connections": 20, "mode": "read", "limits": { "burst": 5 } })
        );
        let given = pools()
            .check(&json!({ "max_connections": 7, "mode": "read-write" }))
            .expect("valid");
        assert_eq!(given["max_connections"], 7);
        assert_eq!(given["mode"], "read-write");
    }

    #[test]
    fn every_keyword_names_its_field() {
        let cases = [
            (
                json!({ "max_connections": 501 }),
                "field `params.max_connections`: must be at most 500",
            ),
            (
                json!({ "max_connections": 0 }),
                "field `params.max_connections`: must be at least 1",
            ),
            (
                json!({ "max_connections": "lots" }),
                "field `params.max_connections`: must be a whole number",
            ),
            (
                json!({ "max_connections": 2.5 }),
                "field `params.max_connections`: must be a whole number",
            ),
            (
                json!({ "mode": "write" }),
                "field `params.mode`: must be one of: read, read-write",
            ),
            (
                json!({ "owner": "Ab" }),
                "field `params.owner`: must match the pattern ^[a-z]+$",
            ),
            (
                json!({ "owner": "a" }),
                "field `params.owner`: must be at least 2 characters",
            ),
            (
                json!({ "owner": "abcdefghi" }),
                "field `params.owner`: must be at most 8 characters",
            ),
            (
                json!({ "ratio": 1 }),
                "field `params.ratio`: must be less than 1",
            ),
            (
                json!({ "ratio": 0 }),
                "field `params.ratio`: must be more than 0",
            ),
            (
                json!({ "tls": "yes" }),
                "field `params.tls`: must be true or false",
            ),
            (
                json!({ "limits": { "burst": "x" } }),
                "field `params.limits.burst`: must be a whole number",
            ),
            (
                json!({ "root": true }),
                "field `params.root`: not a parameter of this target",
            ),
        ];
        for (params, expected) in cases {
            let shown = failures(params.clone());
            assert!(shown.contains(&expected.to_owned()), "{params}: {shown:?}");
        }
    }

    #[test]
    fn a_missing_required_field_is_named_and_every_failure_is_reported() {
        let schema = ParamsSchema::compile(json!({
            "type": "object",
            "required": ["team"],
            "properties": { "team": { "type": "string" }, "size": { "type": "integer" } }
        }))
        .expect("valid");
        let errors = schema
            .check(&json!({ "size": "big" }))
            .expect_err("refused");
        let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            shown.contains(&"field `params.team`: is required".to_owned()),
            "{shown:?}"
        );
        assert!(
            shown.contains(&"field `params.size`: must be a whole number".to_owned()),
            "{shown:?}"
        );
    }

    #[test]
    fn the_example_a_template_is_tried_with_names_every_declared_parameter() {
        assert_eq!(
            pools().example(),
            json!({
                "max_connections": 20,
                "mode": "read",
                "owner": "example",
                "ratio": 1.5,
                "tls": true,
                "limits": { "burst": 5 }
            })
        );
    }

    #[test]
    fn the_smallest_request_has_the_defaults_and_the_required_parameters_only() {
        let schema = ParamsSchema::compile(json!({
            "type": "object",
            "required": ["team"],
            "properties": {
                "team": { "type": "string" },
                "size": { "type": "integer", "default": 3 },
                "debug": { "type": "boolean" }
            }
        }))
        .expect("valid");
        assert_eq!(schema.minimal(), json!({ "team": "example", "size": 3 }));
    }

    #[test]
    fn named_parameters_are_optional_strings_and_nothing_else() {
        let schema = ParamsSchema::of_names(&["level".to_owned()]);
        assert_eq!(schema.names(), ["level"]);
        assert!(schema.check(&json!({})).is_ok());
        assert!(schema.check(&json!({ "level": "read" })).is_ok());
        assert_eq!(
            schema.check(&json!({ "level": 2 })).expect_err("a number")[0].to_string(),
            "field `params.level`: must be a string"
        );
        assert_eq!(
            schema.check(&json!({ "root": "x" })).expect_err("unknown")[0].to_string(),
            "field `params.root`: not a parameter of this target"
        );
    }

    #[test]
    fn a_schema_that_cannot_describe_params_is_refused_with_the_reason() {
        for (schema, says) in [
            (json!(["not", "an", "object"]), "must be a table"),
            (json!({ "type": "string" }), "type = \"object\""),
            (
                json!({ "type": "object", "properties": [] }),
                "`properties` must be a table",
            ),
            (
                json!({ "type": "object", "properties": { "n": { "type": "integr" } } }),
                "not a valid JSON Schema",
            ),
            (
                json!({ "type": "object", "properties": { "n": { "minimum": "one" } } }),
                "not a valid JSON Schema",
            ),
            (
                json!({ "type": "object", "properties": { "n": { "type": "integer", "maximum": 5, "default": 9 } } }),
                "its defaults do not pass it: field `params.n`: must be at most 5",
            ),
        ] {
            let err = ParamsSchema::compile(schema.clone()).expect_err("refused");
            assert!(err.contains(says), "{schema}: {err}");
        }
        let required_without_default = json!({
            "type": "object", "required": ["n"], "properties": { "n": { "type": "integer" } }
        });
        assert!(ParamsSchema::compile(required_without_default).is_ok());
    }
}
