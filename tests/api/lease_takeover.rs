//! Leases are released, not left to run out: an instance stopped with
//! SIGTERM leaves none behind, and one killed and started again on its port
//! takes over what its earlier life held at once, although the leases
//! would have lasted a minute.

use std::time::{Duration, Instant};

use changegate_sim::approval::{Decision, DecisionPolicy};
use changegate_sim::gitlab::Endpoint;

use crate::durability::{Outside, all_validated, apply_as, config, free_port, outside, start};
use crate::helpers::each_backend;

/// A config whose step leases last a minute: a test that finishes well
/// within it shows leases were released, not waited out.
fn long_lease_config(db_url: &str, port: u16, outside: &Outside) -> String {
    config(db_url, port, outside, "approval_first", false)
        .replace("lease = \"2s\"", "lease = \"60s\"")
        .replace("[server]\n", "[server]\nshutdown_timeout = \"1s\"\n")
}

/// One request whose branch creation GitLab answers only after 8 s, and
/// the moment its step (holding its lease) is waiting for that answer.
async fn stuck_in_a_step(outside: &Outside, client: &reqwest::Client, address: &str) -> String {
    outside.gitlab.inject(
        changegate_sim::gitlab::Fault::new(
            Endpoint::CreateBranch,
            changegate_sim::gitlab::FaultKind::Slow(Duration::from_secs(8)),
        )
        .times(1),
    );
    let id = apply_as(client, address, "alice").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while outside.gitlab.calls(Endpoint::CreateBranch) == 0 {
        assert!(Instant::now() < deadline, "the step never reached GitLab");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_and_started_again_on_its_port_an_instance_takes_over_its_leases_at_once() {
    for test_db in each_backend().await {
        let outside = outside(DecisionPolicy::Auto {
            result: Decision::Approved,
            delay: Duration::ZERO,
        })
        .await;
        let port = free_port();
        let address = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("changegate.toml");
        std::fs::write(
            &config_path,
            long_lease_config(&test_db.url, port, &outside),
        )
        .unwrap();
        let client = crate::helpers::plain_client().build().unwrap();
        let service = start(&config_path, &address, &client).await;
        outside
            .approval
            .set_callback_url(format!("{address}/callbacks/approval"));
        outside
            .deploy
            .set_callback_url(format!("{address}/callbacks/deploy"));
        let id = stuck_in_a_step(&outside, &client, &address).await;

        drop(service);
        let _again = start(&config_path, &address, &client).await;

        all_validated(
            &client,
            &address,
            &[("alice".to_owned(), id)],
            Duration::from_secs(25),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_stopped_with_sigterm_leaves_no_lease_behind() {
    for test_db in each_backend().await {
        let outside = outside(DecisionPolicy::Auto {
            result: Decision::Approved,
            delay: Duration::ZERO,
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let client = crate::helpers::plain_client().build().unwrap();
        let (first_port, second_port) = (free_port(), free_port());
        let first_address = format!("http://127.0.0.1:{first_port}");
        let first_config = dir.path().join("first.toml");
        std::fs::write(
            &first_config,
            long_lease_config(&test_db.url, first_port, &outside),
        )
        .unwrap();
        let mut first = start(&first_config, &first_address, &client).await;
        outside
            .approval
            .set_callback_url(format!("{first_address}/callbacks/approval"));
        let id = stuck_in_a_step(&outside, &client, &first_address).await;

        let terminated = std::process::Command::new("kill")
            .args(["-TERM", &first.0.id().to_string()])
            .status()
            .unwrap();
        assert!(terminated.success());
        let exit = first.0.wait().unwrap();
        assert!(exit.success(), "{}: a clean exit: {exit}", test_db.name);

        // Another instance (another port, so not the same seat) finds the
        // step free, although its lease would have lasted a minute.
        let second_address = format!("http://127.0.0.1:{second_port}");
        let second_config = dir.path().join("second.toml");
        std::fs::write(
            &second_config,
            long_lease_config(&test_db.url, second_port, &outside),
        )
        .unwrap();
        let _second = start(&second_config, &second_address, &client).await;
        outside
            .deploy
            .set_callback_url(format!("{second_address}/callbacks/deploy"));
        all_validated(
            &client,
            &second_address,
            &[("alice".to_owned(), id)],
            Duration::from_secs(25),
        )
        .await;
    }
}
