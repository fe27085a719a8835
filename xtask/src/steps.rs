//! The step codes page, from `changegate::domain::StepStatus`.

use std::fmt::Write as _;

use changegate::domain::{Phase, StepStatus};

/// The page: one table per phase, every step with its code, name and meaning.
pub fn render() -> String {
    let mut page = String::from(
        "# Step codes\n\n\
         <!-- Generated from src/domain/step.rs by `cargo run -p xtask -- docs`; edit the code, not this page. -->\n\n\
         Every request shows the step it is at (`step.code`, `step.name` in the \
         status and timeline answers, `step` in metrics). Codes are grouped by \
         phase in numeric ranges, so a prefix selects a phase.\n",
    );
    let phases = [
        (
            Phase::Create,
            "Create: from submission until the MR is ready",
        ),
        (Phase::Handle, "Handle: reviewer approvals and merge"),
        (Phase::Close, "Close: removal of a binding"),
        (
            Phase::Callback,
            "Callback: results reported by callbacks and reconciliation",
        ),
        (
            Phase::Pending,
            "Pending: an unknown outcome, or an operator's decision",
        ),
    ];
    for (phase, title) in phases {
        let _ = write!(
            page,
            "\n## {title}\n\n| code | name | meaning |\n|---|---|---|\n"
        );
        for step in StepStatus::ALL.iter().filter(|step| step.phase() == phase) {
            let _ = writeln!(
                page,
                "| {} | `{}` | {} |",
                step.code(),
                step.name(),
                step.description()
            );
        }
    }
    page
}
