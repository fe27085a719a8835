//! The one table of legal binding status moves. Every status write is checked
//! against it; an illegal move is an error, never a silent write (SPEC §1).

use super::BindingStatus::{self, *};

/// `(from, legal destinations)`. Both flow orders share the table: approval
/// first runs SENDING → SENT → MR_CREATING → MR_CREATED → MERGING; MR first
/// runs MR_CREATING → MR_CREATED → APPROVAL_SENDING → APPROVAL_SENT → MERGING.
/// A re-apply resets a re-appliable row to a first status of either order.
pub const LEGAL_TRANSITIONS: &[(BindingStatus, &[BindingStatus])] = &[
    (
        ApprovalSending,
        &[
            ApprovalSent,
            // the callback can beat the SENT write
            MrCreating,
            Merging,
            Rejected,
            CreateFailed,
            BusyRejected,
            Abandoned,
        ],
    ),
    (
        ApprovalSent,
        &[MrCreating, Merging, Rejected, CreateFailed, Abandoned],
    ),
    (
        MrCreating,
        &[
            MrCreated,
            // the target branch already holds the file as rendered
            Validated,
            CreateFailed,
            BusyRejected,
            Abandoned,
        ],
    ),
    (
        MrCreated,
        &[
            Merging,
            // MR-first: the MR exists before approval is asked
            ApprovalSending,
            // a failed batch sends its members back to wait for a smaller one
            MrCreating,
            // its MR was merged outside changegate while its pipeline ran
            Merged,
            CreateFailed,
            Abandoned,
        ],
    ),
    (Merging, &[Merged, MrCreating, HandleFailed, Abandoned]),
    (Merged, &[Validated, Closing]),
    // An operator's restore writes the binding's rendering again over a
    // file that drifted: a new request takes the live binding over.
    (Validated, &[Closing, ApprovalSending, MrCreating]),
    // MR_CREATED: an operator's retry runs a failed pipeline again.
    (
        CreateFailed,
        &[ApprovalSending, MrCreating, MrCreated, Abandoned],
    ),
    (
        HandleFailed,
        &[Merging, MrCreating, MrCreated, Merged, Abandoned],
    ),
    // A scheduled removal withdrawn before its time hands the binding back
    // to the request it took it from, in the status that request left.
    (Closing, &[Closed, CloseFailed, Merged, Validated]),
    (CloseFailed, &[Closing, Closed]),
    (Rejected, &[ApprovalSending, MrCreating]),
    (BusyRejected, &[ApprovalSending, MrCreating]),
    (Closed, &[ApprovalSending, MrCreating]),
    (Abandoned, &[ApprovalSending, MrCreating]),
];

/// A move the table does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal binding transition {from} -> {to}")]
pub struct IllegalTransition {
    /// The current status.
    pub from: BindingStatus,
    /// The requested status.
    pub to: BindingStatus,
}

/// Checks `from -> to` against [`LEGAL_TRANSITIONS`].
pub fn check_transition(from: BindingStatus, to: BindingStatus) -> Result<(), IllegalTransition> {
    let legal = LEGAL_TRANSITIONS
        .iter()
        .find(|(source, _)| *source == from)
        .is_some_and(|(_, targets)| targets.contains(&to));
    if legal {
        Ok(())
    } else {
        Err(IllegalTransition { from, to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::REAPPLIABLE;

    #[test]
    fn every_status_has_exactly_one_row() {
        for status in BindingStatus::ALL {
            let rows = LEGAL_TRANSITIONS
                .iter()
                .filter(|(from, _)| *from == status)
                .count();
            assert_eq!(rows, 1, "{status}");
        }
    }

    #[test]
    fn every_legal_move_is_accepted() {
        for (from, targets) in LEGAL_TRANSITIONS {
            for to in *targets {
                assert_eq!(check_transition(*from, *to), Ok(()), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn moves_outside_the_table_are_errors() {
        let mut illegal = 0;
        for from in BindingStatus::ALL {
            for to in BindingStatus::ALL {
                let listed = LEGAL_TRANSITIONS
                    .iter()
                    .any(|(source, targets)| *source == from && targets.contains(&to));
                if !listed {
                    assert_eq!(
                        check_transition(from, to),
                        Err(IllegalTransition { from, to })
                    );
                    illegal += 1;
                }
            }
        }
        assert!(
            illegal > 150,
            "the table should be sparse, found {illegal} illegal moves"
        );
    }

    #[test]
    fn samples_of_illegal_moves() {
        for (from, to) in [
            (Validated, Merging),
            (Rejected, Validated),
            (Merged, ApprovalSent),
            (ApprovalSent, Merged),
            (CreateFailed, Validated),
            (Closed, Closing),
            (Validated, Validated),
        ] {
            assert!(check_transition(from, to).is_err(), "{from} -> {to}");
        }
    }

    #[test]
    fn reappliable_statuses_reset_only_to_a_first_status() {
        for from in REAPPLIABLE {
            for to in BindingStatus::ALL {
                let allowed = check_transition(*from, to).is_ok();
                assert_eq!(
                    allowed,
                    matches!(to, ApprovalSending | MrCreating),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn both_flow_orders_reach_validated() {
        let approval_first = [
            ApprovalSending,
            ApprovalSent,
            MrCreating,
            MrCreated,
            Merging,
            Merged,
            Validated,
        ];
        let mr_first = [
            MrCreating,
            MrCreated,
            ApprovalSending,
            ApprovalSent,
            Merging,
            Merged,
            Validated,
        ];
        for path in [approval_first, mr_first] {
            for pair in path.windows(2) {
                assert_eq!(
                    check_transition(pair[0], pair[1]),
                    Ok(()),
                    "{} -> {}",
                    pair[0],
                    pair[1]
                );
            }
        }
    }
}
