//! changegate's development tasks. `cargo run -p xtask -- docs` writes the
//! manual's generated reference pages (the CLI, the HTTP API and its OpenAPI
//! document, the step codes); `-- docs --check` writes nothing and fails when
//! one of them differs from what the code produces now. Both fail when a
//! configuration key, metric or alert is missing from the hand-written
//! reference pages, or when those pages name one that does not exist.

mod api;
mod checks;
mod cli_page;
mod steps;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "changegate's development tasks")]
struct Args {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Writes the manual's generated reference pages under docs/src/reference
    /// and checks the hand-written ones against the code.
    Docs {
        /// Write nothing: fail when a generated page is not what the code
        /// produces now.
        #[arg(long)]
        check: bool,
    },
}

/// A page of the manual made from the code: its path under the repository,
/// and its text.
struct Generated {
    path: &'static str,
    text: String,
}

fn main() -> ExitCode {
    let Task::Docs { check } = Args::parse().task;
    match docs(&repository(), check) {
        Ok(problems) if problems.is_empty() => ExitCode::SUCCESS,
        Ok(problems) => {
            for problem in problems {
                eprintln!("error: {problem}");
            }
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The repository's root: xtask lives one directory below it.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the repository")
        .to_owned()
}

fn docs(root: &Path, check: bool) -> anyhow::Result<Vec<String>> {
    let runtime = tokio::runtime::Runtime::new()?;
    let document = runtime.block_on(api::openapi_document())?;
    let pages = [
        Generated {
            path: "docs/src/reference/cli.md",
            text: cli_page::render(&changegate::cli::command()),
        },
        Generated {
            path: "docs/src/reference/endpoints.md",
            text: api::render(&document),
        },
        Generated {
            path: "docs/src/reference/openapi.json",
            text: format!("{}\n", serde_json::to_string_pretty(&document)?),
        },
        Generated {
            path: "docs/src/reference/steps.md",
            text: steps::render(),
        },
    ];
    let mut problems = Vec::new();
    for page in pages {
        let path = root.join(page.path);
        let now = std::fs::read_to_string(&path).ok();
        if now.as_deref() == Some(page.text.as_str()) {
            continue;
        }
        if check {
            problems.push(format!(
                "{} is not what the code produces now: run `cargo run -p xtask -- docs`",
                page.path
            ));
        } else {
            std::fs::write(&path, &page.text)?;
            println!("wrote {}", page.path);
        }
    }
    problems.extend(checks::configuration(root)?);
    problems.extend(checks::metrics(root)?);
    problems.extend(checks::alerts(root)?);
    Ok(problems)
}
