//! Authentication, unknown projects and rate limiting against `cross_cutting.json`.

use std::time::Duration;

use changegate_sim::gitlab::{Endpoint, Fault, FaultKind};
use reqwest::Method;

use super::Contract;
use crate::gitlab::support::{BOT, Fixture};

#[tokio::test]
async fn cross_cutting_answers_follow_the_contract() {
    let contract = Contract::new(include_str!("../../fixtures/gitlab/cross_cutting.json"));
    let fx = Fixture::start().await;

    let anonymous = fx.send(Method::GET, None, &fx.root, None).await;
    contract.check("unauthorized", &anonymous);
    let unknown = fx.get(BOT, "/projects/nope%2Fnope").await;
    contract.check("project_not_found", &unknown);

    let retry_after = Duration::from_secs(30);
    let limited = FaultKind::RateLimited { retry_after };
    fx.sim.inject(Fault::new(Endpoint::GetProject, limited));
    fx.sim
        .inject(Fault::new(Endpoint::GetProject, FaultKind::RateLimitedBare));
    contract.check("rate_limited", &fx.get(BOT, &fx.root).await);
    contract.check("rate_limited_bare", &fx.get(BOT, &fx.root).await);

    contract.assert_all_checked();
}
