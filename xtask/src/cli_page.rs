//! The command-line page, from the binary's clap definition.

use std::fmt::Write as _;

use clap::Command;

/// The page: the program's help, then each subcommand's usage, text and
/// arguments.
pub fn render(root: &Command) -> String {
    let mut root = root.clone().bin_name("changegate");
    root.build();
    let mut page = String::from(
        "# Command line\n\n\
         <!-- Generated from src/cli.rs by `cargo run -p xtask -- docs`; edit the code, not this page. -->\n\n",
    );
    let _ = writeln!(page, "{}\n", about(&root));
    let _ = writeln!(
        page,
        "```text\n{}\n```",
        root.render_usage().to_string().trim()
    );
    for command in root.get_subcommands().filter(|c| c.get_name() != "help") {
        let _ = writeln!(page, "\n## `changegate {}`\n", command.get_name());
        let _ = writeln!(page, "{}\n", about(command));
        let _ = writeln!(
            page,
            "```text\n{}\n```",
            command.clone().render_usage().to_string().trim()
        );
        arguments(&mut page, command);
    }
    page
}

/// The command's long text, else its short one.
fn about(command: &Command) -> String {
    command
        .get_long_about()
        .or(command.get_about())
        .map(|text| text.to_string().trim().to_owned())
        .unwrap_or_default()
}

fn arguments(page: &mut String, command: &Command) {
    let arguments: Vec<_> = command
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if arguments.is_empty() {
        return;
    }
    let _ = writeln!(page, "\n| argument | environment | what |\n|---|---|---|");
    for argument in arguments {
        let name = match (argument.get_long(), argument.get_short()) {
            (Some(long), Some(short)) => format!("`-{short}`, `--{long}`"),
            (Some(long), None) => format!("`--{long}`"),
            (None, Some(short)) => format!("`-{short}`"),
            (None, None) => format!("`<{}>`", argument.get_id().as_str().to_uppercase()),
        };
        let environment = argument
            .get_env()
            .map(|env| format!("`{}`", env.to_string_lossy()))
            .unwrap_or_default();
        let help = argument
            .get_long_help()
            .or(argument.get_help())
            .map(|text| text.to_string().replace('\n', " "))
            .unwrap_or_default();
        let _ = writeln!(page, "| {name} | {environment} | {help} |");
    }
}
