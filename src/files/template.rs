//! A target's file template (MiniJinja): what a binding's file says, in the
//! repository's own format. A template is the operator's code run on a
//! requester's values, so it runs strict (an undefined name is an error,
//! never an empty string in a configuration file) and with bounded fuel.

use std::fmt;
use std::sync::Arc;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// What a template sees.
#[derive(Debug, Serialize)]
pub struct TemplateContext<'a> {
    /// The binding's subject.
    pub subject: &'a str,
    /// The target's key.
    pub target: &'a str,
    /// The parameters, defaults filled in.
    pub params: &'a serde_json::Value,
    /// Expiry, RFC 3339 UTC, or none.
    pub expires_at: Option<&'a str>,
    /// The operation that writes the file.
    pub operation_id: &'a str,
    /// Who asked for it.
    pub requested_by: &'a str,
}

/// A compiled template and its source.
#[derive(Clone)]
pub struct FileTemplate {
    source: Arc<str>,
    environment: Arc<Environment<'static>>,
}

const NAME: &str = "file";

/// Enough instructions for any configuration file a person would write; a
/// loop that runs away is stopped instead of holding a worker.
const FUEL: u64 = 1_000_000;

impl FileTemplate {
    /// `source` compiled, or the parser's reason (with its line).
    pub fn compile(source: &str) -> Result<Self, String> {
        let mut environment = Environment::new();
        environment.set_undefined_behavior(UndefinedBehavior::Strict);
        environment.set_fuel(Some(FUEL));
        // Block tags on lines of their own leave no blank lines behind, and
        // the file keeps the newline it ends with, as people write files.
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()
            .map_err(|err| err.to_string())?;
        environment.set_syntax(syntax);
        environment
            .add_template_owned(NAME, source.to_owned())
            .map_err(|err| describe(&err))?;
        Ok(Self {
            source: source.into(),
            environment: Arc::new(environment),
        })
    }

    /// The file the template makes for `context`, or why it could not.
    pub fn render(&self, context: &TemplateContext<'_>) -> Result<String, String> {
        self.environment
            .get_template(NAME)
            .and_then(|template| {
                template.render(minijinja::Value::from(minijinja::value::Serde(context)))
            })
            .map_err(|err| describe(&err))
    }
}

/// The error's words and where in the template it happened.
fn describe(err: &minijinja::Error) -> String {
    let detail = err.detail().map(|d| format!(": {d}")).unwrap_or_default();
    match err.line() {
        Some(line) => format!("{}{detail} (template line {line})", err.kind()),
        None => format!("{}{detail}", err.kind()),
    }
}

impl fmt::Debug for FileTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FileTemplate").field(&self.source).finish()
    }
}

/// Equal when written alike: a reload that changes nothing keeps targets equal.
impl PartialEq for FileTemplate {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(params: &serde_json::Value) -> TemplateContext<'_> {
        TemplateContext {
            subject: "team-a",
            target: "db.pools",
            params,
            expires_at: None,
            operation_id: "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            requested_by: "alice",
        }
    }

    #[test]
    fn a_template_renders_the_same_bytes_every_time_and_keeps_its_last_newline() {
        let template = FileTemplate::compile(
            "# {{ subject }} ({{ requested_by }})\n{% if params.tls %}\ntls: true\n{% endif %}\nsize: {{ params.size }}\nname: {{ params.name | tojson }}\n",
        )
        .expect("compiles");
        let params = serde_json::json!({ "size": 5, "tls": true, "name": "a \"b\"" });
        let first = template.render(&context(&params)).expect("renders");
        assert_eq!(
            first,
            "# team-a (alice)\ntls: true\nsize: 5\nname: \"a \\\"b\\\"\"\n"
        );
        assert_eq!(template.render(&context(&params)).expect("renders"), first);
    }

    #[test]
    fn an_undefined_name_is_an_error_not_an_empty_value() {
        let template = FileTemplate::compile("size: {{ params.sise }}\n").expect("compiles");
        let err = template
            .render(&context(&serde_json::json!({ "size": 5 })))
            .expect_err("undefined");
        assert!(err.contains("undefined"), "{err}");
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn a_syntax_error_names_its_line_and_a_runaway_loop_is_stopped() {
        let err = FileTemplate::compile("a: 1\nb: {{ params.x\n").expect_err("syntax");
        assert!(err.contains("syntax error"), "{err}");
        assert!(err.contains("line 2"), "{err}");
        let runaway = FileTemplate::compile(
            "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}x{% endfor %}{% endfor %}{% endfor %}",
        )
        .expect("compiles");
        let err = runaway
            .render(&context(&serde_json::json!({})))
            .expect_err("out of fuel");
        assert!(err.contains("fuel"), "{err}");
    }
}
