//! Every body the simulator serves for an endpoint changegate uses carries the fields
//! GitLab's published v4 response schemas require, each with the schema's JSON type, and
//! `null` only where the schema allows it.
//!
//! The field lists are written from `gitlabhq/gitlabhq`'s
//! `spec/fixtures/api/schemas/public_api/v4/`: `merge_request.json` (single MR; its
//! `head_pipeline` is `pipeline/detail.json`), `merge_requests.json` (list items),
//! `branch.json`, `commit/basic.json`, `commit/detail.json` with `commit_stats.json`,
//! `pipeline/basic.json`, `pipeline.json`, `pipeline/detail.json`, `user/basic.json`,
//! `projects.json`, and `spec/fixtures/api/schemas/status/ci_detailed_status.json`.
//! Where a body has no schema there (approvals, files, tree) or a schema leaves out what
//! the entity always exposes, the list follows the entity: `lib/api/entities/`
//! (`merge_request_approvals.rb`, `commit_detail.rb`, `ci/pipeline.rb`,
//! `tree_object.rb`, `user_basic.rb`), EE's `ee/lib/api/entities/approval_state.rb`, and
//! `lib/api/files.rb`. One deliberate difference: `merge_request.json` types `assignee`
//! as `user/basic.json` (an object) only because its fixtures always have one; the list
//! schema and GitLab itself answer `null` for an MR nobody is assigned, so `null` is
//! allowed there.

use changegate_sim::gitlab::Tier;
use serde_json::{Value, json};

use super::support::{ALICE, BOT, Fixture};
use Type::{Array, Boolean, Integer, Number, Object, String as Str};

/// A JSON type as the schemas name it.
#[derive(Clone, Copy, Debug)]
enum Type {
    Integer,
    Number,
    String,
    Boolean,
    Array,
    Object,
}

impl Type {
    fn matches(self, value: &Value) -> bool {
        match self {
            Self::Integer => value.is_i64() || value.is_u64(),
            Self::Number => value.is_number(),
            Self::String => value.is_string(),
            Self::Boolean => value.is_boolean(),
            Self::Array => value.is_array(),
            Self::Object => value.is_object(),
        }
    }
}

/// A field a body must carry.
struct Field {
    name: &'static str,
    kind: Type,
    nullable: bool,
    /// For an object: its own fields; for an array: each item's.
    inner: &'static [Field],
}

const fn field(name: &'static str, kind: Type) -> Field {
    Field {
        name,
        kind,
        nullable: false,
        inner: &[],
    }
}

const fn or_null(name: &'static str, kind: Type) -> Field {
    Field {
        name,
        kind,
        nullable: true,
        inner: &[],
    }
}

const fn nested(name: &'static str, kind: Type, nullable: bool, inner: &'static [Field]) -> Field {
    Field {
        name,
        kind,
        nullable,
        inner,
    }
}

/// `user/basic.json`, with `username` and `name` from `UserBasic`.
const USER_BASIC: &[Field] = &[
    field("id", Integer),
    field("state", Str),
    field("avatar_url", Str),
    field("web_url", Str),
    field("username", Str),
    field("name", Str),
];

/// `ci_detailed_status.json`.
const DETAILED_STATUS: &[Field] = &[
    field("icon", Str),
    field("text", Str),
    field("label", Str),
    field("group", Str),
    field("tooltip", Str),
    field("has_details", Boolean),
    or_null("details_path", Str),
    field("favicon", Str),
];

/// `pipeline/basic.json` and `pipeline.json`, with `project_id` from `PipelineBasic`.
const PIPELINE_BASIC: &[Field] = &[
    field("id", Integer),
    field("project_id", Integer),
    field("sha", Str),
    field("ref", Str),
    field("status", Str),
    field("created_at", Str),
    field("updated_at", Str),
    field("web_url", Str),
];

/// `pipeline/detail.json` on top of [`PIPELINE_BASIC`] (all that `Ci::Pipeline` exposes).
const PIPELINE_DETAIL: &[Field] = &[
    or_null("before_sha", Str),
    field("tag", Boolean),
    or_null("yaml_errors", Str),
    nested("user", Object, true, USER_BASIC),
    or_null("started_at", Str),
    or_null("finished_at", Str),
    or_null("committed_at", Str),
    or_null("duration", Number),
    or_null("queued_duration", Number),
    or_null("coverage", Str),
    nested("detailed_status", Object, true, DETAILED_STATUS),
];

/// `commit/basic.json`.
const COMMIT_BASIC: &[Field] = &[
    or_null("id", Str),
    or_null("short_id", Str),
    field("title", Str),
    field("created_at", Str),
    or_null("parent_ids", Array),
    field("message", Str),
    field("author_name", Str),
    field("author_email", Str),
    field("authored_date", Str),
    field("committer_name", Str),
    field("committer_email", Str),
    field("committed_date", Str),
    field("web_url", Str),
];

/// `commit_stats.json`.
const COMMIT_STATS: &[Field] = &[
    field("additions", Integer),
    field("deletions", Integer),
    field("total", Integer),
];

/// `commit/detail.json` on top of [`COMMIT_BASIC`], with `project_id` and
/// `last_pipeline` from `CommitDetail`.
const COMMIT_DETAIL: &[Field] = &[
    nested("stats", Object, false, COMMIT_STATS),
    or_null("status", Str),
    field("project_id", Integer),
    nested("last_pipeline", Object, true, PIPELINE_BASIC),
];

/// `branch.json`.
const BRANCH: &[Field] = &[
    field("name", Str),
    nested("commit", Object, false, COMMIT_BASIC),
    field("merged", Boolean),
    field("protected", Boolean),
    field("default", Boolean),
    field("developers_can_push", Boolean),
    field("developers_can_merge", Boolean),
    field("can_push", Boolean),
    field("web_url", Str),
];

/// The required fields `merge_request.json` and `merge_requests.json` share, with
/// `detailed_merge_status` (15.6+), which changegate reads.
const MERGE_REQUEST_BASIC: &[Field] = &[
    field("id", Integer),
    field("iid", Integer),
    field("project_id", Integer),
    field("title", Str),
    or_null("description", Str),
    field("state", Str),
    field("created_at", Str),
    field("updated_at", Str),
    field("target_branch", Str),
    field("source_branch", Str),
    field("upvotes", Integer),
    field("downvotes", Integer),
    nested("author", Object, false, USER_BASIC),
    nested("assignee", Object, true, USER_BASIC),
    field("source_project_id", Integer),
    field("target_project_id", Integer),
    field("labels", Array),
    field("work_in_progress", Boolean),
    or_null("milestone", Object),
    field("merge_when_pipeline_succeeds", Boolean),
    field("merge_status", Str),
    field("detailed_merge_status", Str),
    field("sha", Str),
    or_null("merge_commit_sha", Str),
    field("user_notes_count", Integer),
    or_null("should_remove_source_branch", Boolean),
    or_null("force_remove_source_branch", Boolean),
    field("web_url", Str),
    field("squash", Boolean),
];

/// `merge_requests.json`'s one addition.
const MERGE_REQUEST_LIST_ITEM: &[Field] = &[or_null("approvals_before_merge", Integer)];

/// `merge_request.json`'s `head_pipeline` (`pipeline/detail.json`, which is
/// `pipeline/basic.json` and more, or null), with the single MR's `merge_error` and
/// `user`, which changegate reads.
const MERGE_REQUEST_DETAIL: &[Field] = &[
    nested("head_pipeline", Object, true, PIPELINE_BASIC),
    nested("head_pipeline", Object, true, PIPELINE_DETAIL),
    or_null("merge_error", Str),
    field("user", Object),
];

/// `{"user": UserBasic}`, an item of `approved_by` (`Entities::Approvals`).
const APPROVER: &[Field] = &[nested("user", Object, false, USER_BASIC)];

/// `MergeRequestApprovals`, the Free tier's body.
const APPROVALS_FREE: &[Field] = &[
    field("user_has_approved", Boolean),
    field("user_can_approve", Boolean),
    field("approved", Boolean),
    nested("approved_by", Array, false, APPROVER),
];

/// `ApprovalRuleShort`, an item of `approval_rules_left`.
const RULE_SHORT: &[Field] = &[
    field("id", Integer),
    field("name", Str),
    field("rule_type", Str),
];

/// EE's `ApprovalState`.
const APPROVAL_STATE: &[Field] = &[
    field("id", Integer),
    field("iid", Integer),
    field("project_id", Integer),
    field("title", Str),
    or_null("description", Str),
    field("state", Str),
    field("created_at", Str),
    field("updated_at", Str),
    field("merge_status", Str),
    field("approved", Boolean),
    field("approvals_required", Integer),
    field("approvals_left", Integer),
    field("require_password_to_approve", Boolean),
    nested("approved_by", Array, false, APPROVER),
    field("suggested_approvers", Array),
    nested("approvers", Array, false, APPROVER),
    field("approver_groups", Array),
    field("user_has_approved", Boolean),
    field("user_can_approve", Boolean),
    nested("approval_rules_left", Array, false, RULE_SHORT),
    field("has_approval_rules", Boolean),
    field("merge_request_approvers_available", Boolean),
    field("multiple_approval_rules_available", Boolean),
    field("invalid_approvers_rules", Array),
];

/// `GET …/repository/files/:path` (`lib/api/files.rb`).
const FILE: &[Field] = &[
    field("file_name", Str),
    field("file_path", Str),
    field("size", Integer),
    field("encoding", Str),
    field("content", Str),
    field("content_sha256", Str),
    field("ref", Str),
    field("blob_id", Str),
    field("commit_id", Str),
    field("last_commit_id", Str),
    field("execute_filemode", Boolean),
];

/// `TreeObject`.
const TREE_OBJECT: &[Field] = &[
    field("id", Str),
    field("name", Str),
    field("type", Str),
    field("path", Str),
    field("mode", Str),
];

/// `projects.json`'s items, with the settings changegate relies on from `ProjectDetails`.
const PROJECT: &[Field] = &[
    field("id", Integer),
    field("name", Str),
    field("name_with_namespace", Str),
    or_null("description", Str),
    field("path", Str),
    field("path_with_namespace", Str),
    field("created_at", Str),
    or_null("default_branch", Str),
    field("tag_list", Array),
    field("ssh_url_to_repo", Str),
    field("http_url_to_repo", Str),
    field("web_url", Str),
    or_null("avatar_url", Str),
    field("star_count", Integer),
    field("last_activity_at", Str),
    field("merge_method", Str),
    field("only_allow_merge_if_pipeline_succeeds", Boolean),
];

/// What is wrong with `body` against every list of `schemas`, each problem named by
/// its path from `at`.
fn problems(body: &Value, schemas: &[&[Field]], at: &str) -> Vec<String> {
    let mut found = Vec::new();
    for fields in schemas {
        check(body, fields, at, &mut found);
    }
    found
}

fn check(body: &Value, fields: &[Field], at: &str, found: &mut Vec<String>) {
    for field in fields {
        let path = format!("{at}.{}", field.name);
        let Some(value) = body.get(field.name) else {
            found.push(format!("{path} is missing"));
            continue;
        };
        if value.is_null() {
            if !field.nullable {
                found.push(format!("{path} is null"));
            }
            continue;
        }
        if !field.kind.matches(value) {
            found.push(format!("{path} is not {:?}: {value}", field.kind));
            continue;
        }
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    check(item, field.inner, &format!("{path}[{i}]"), found);
                }
            }
            _ => check(value, field.inner, &path, found),
        }
    }
}

/// Asserts that `body` (or, for a list, each item of it, of which there must be some)
/// fits `schemas`.
fn assert_fits(what: &str, body: &Value, schemas: &[&[Field]]) {
    let items: Vec<&Value> = match body {
        Value::Array(items) => {
            assert!(!items.is_empty(), "{what}: an empty list proves nothing");
            items.iter().collect()
        }
        one => vec![one],
    };
    let found: Vec<String> = items
        .iter()
        .enumerate()
        .flat_map(|(i, item)| problems(item, schemas, &format!("{what}[{i}]")))
        .collect();
    assert!(
        found.is_empty(),
        "{what} misses its schema:\n{}",
        found.join("\n")
    );
}

#[tokio::test]
async fn every_body_changegate_reads_carries_what_gitlabs_schemas_require() {
    let fx = Fixture::start().await;
    let iid = fx.ready_mr("bot/one", &[("bindings/a.json", "{}\n")]).await;
    let created = fx
        .post(
            BOT,
            &format!("{}/repository/commits", fx.root),
            json!({ "branch": "bot/two", "start_branch": "main", "commit_message": "two",
                    "actions": [{ "action": "create", "file_path": "b.json", "content": "{}\n" }] }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_fits(
        "commit create",
        &created.body,
        &[COMMIT_BASIC, COMMIT_DETAIL],
    );
    let fresh = fx
        .post(
            BOT,
            &format!("{}/merge_requests", fx.root),
            json!({ "source_branch": "bot/two", "target_branch": "main", "title": "two" }),
        )
        .await;
    assert_eq!(fresh.status, 201, "{}", fresh.text);
    assert_fits(
        "MR create",
        &fresh.body,
        &[MERGE_REQUEST_BASIC, MERGE_REQUEST_DETAIL],
    );

    let open = fx.get(BOT, &fx.mr_path(iid, "")).await.body;
    assert!(open["head_pipeline"].is_object(), "{open}");
    assert_fits("MR", &open, &[MERGE_REQUEST_BASIC, MERGE_REQUEST_DETAIL]);
    let pipeline = open["head_pipeline"]["id"].as_u64().unwrap();
    let head = open["sha"].as_str().unwrap();
    let commit = fx
        .get(BOT, &format!("{}/repository/commits/{head}", fx.root))
        .await;
    assert!(commit.body["last_pipeline"].is_object(), "{}", commit.text);
    assert_fits("commit", &commit.body, &[COMMIT_BASIC, COMMIT_DETAIL]);
    let detail = fx
        .get(BOT, &format!("{}/pipelines/{pipeline}", fx.root))
        .await;
    assert_fits("pipeline", &detail.body, &[PIPELINE_BASIC, PIPELINE_DETAIL]);
    let listed = fx.get(BOT, &fx.mr_path(iid, "/pipelines")).await;
    assert_fits("MR pipelines", &listed.body, &[PIPELINE_BASIC]);

    let free = fx.get(ALICE, &fx.mr_path(iid, "/approvals")).await;
    assert_fits("approvals (Free)", &free.body, &[APPROVALS_FREE]);
    fx.sim
        .update_settings(fx.project, |s| s.tier = Tier::Ee)
        .unwrap();
    let premium = fx.get(ALICE, &fx.mr_path(iid, "/approvals")).await;
    assert_fits("approvals (Premium)", &premium.body, &[APPROVAL_STATE]);

    let merged = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(merged.status, 200, "{}", merged.text);
    assert_fits(
        "merged MR",
        &merged.body,
        &[MERGE_REQUEST_BASIC, MERGE_REQUEST_DETAIL],
    );
    let all = fx
        .get(BOT, &format!("{}/merge_requests?state=all", fx.root))
        .await;
    assert_eq!(all.body.as_array().map(Vec::len), Some(2), "{}", all.text);
    assert_fits(
        "MR list",
        &all.body,
        &[MERGE_REQUEST_BASIC, MERGE_REQUEST_LIST_ITEM],
    );

    let branch = fx
        .get(BOT, &format!("{}/repository/branches/main", fx.root))
        .await;
    assert_fits("branch", &branch.body, &[BRANCH]);
    let merge_sha = merged.str("merge_commit_sha");
    let file = fx
        .get(
            BOT,
            &format!(
                "{}/repository/files/bindings%2Fa.json?ref={merge_sha}",
                fx.root
            ),
        )
        .await;
    assert_fits("file", &file.body, &[FILE]);
    let tree = fx
        .get(
            BOT,
            &format!("{}/repository/tree?ref={merge_sha}&recursive=true", fx.root),
        )
        .await;
    assert_fits("tree", &tree.body, &[TREE_OBJECT]);
    let project = fx.get(BOT, &fx.root).await;
    assert_fits("project", &project.body, &[PROJECT]);
}

#[test]
fn the_check_names_what_is_missing_null_or_of_the_wrong_type() {
    let body = json!({
        "id": 1, "iid": "1", "title": null, "author": { "id": 2, "state": "active" },
        "approved_by": [{ "user": null }],
    });
    let schema: &[Field] = &[
        field("id", Integer),
        field("iid", Integer),
        or_null("title", Str),
        field("project_id", Integer),
        nested("author", Object, false, USER_BASIC),
        nested("approved_by", Array, false, APPROVER),
    ];
    let found = problems(&body, &[schema], "mr");
    assert_eq!(
        found,
        [
            "mr.iid is not Integer: \"1\"",
            "mr.project_id is missing",
            "mr.author.avatar_url is missing",
            "mr.author.web_url is missing",
            "mr.author.username is missing",
            "mr.author.name is missing",
            "mr.approved_by[0].user is null",
        ]
    );
}
