//! Released migrations never change: each file's SHA-256 is held here, and a
//! migration edited in place (rather than followed by a new one) fails this
//! test, as does a file nobody recorded. A new migration gets its line when
//! it is added; from then on it is released.

use sha2::{Digest, Sha256};

const RELEASED: &[(&str, &str)] = &[
    (
        "migrations/mysql/0001_state_store.sql",
        "bca70656af86f0dc06860e20c68aab4240b226fe1b27a02cafdd863684680ff4",
    ),
    (
        "migrations/mysql/0002_event_outbox.sql",
        "cac9b11b227344e65aa546c0e62916e32ed80ab113b2a03fec28abeb3b5bd479",
    ),
    (
        "migrations/mysql/0003_idempotency.sql",
        "c8fb825956d18b80c105606f22ccfa392cd73d10adb5bc6c45810cf1a88c022c",
    ),
    (
        "migrations/mysql/0004_callbacks.sql",
        "499d52faa91445d412090549a3e59296218e4de99fc61cf82102ec921bd31f1b",
    ),
    (
        "migrations/mysql/0005_audit.sql",
        "d556652be04c8575fac8fa2ffaf206940dcbd5c38a58f1d02e64f5ca0397bebb",
    ),
    (
        "migrations/mysql/0006_durable_steps.sql",
        "98c232882b5a0a47ec1ae33a474914b080d6f5d8e5d4ecef3849f8636315b99e",
    ),
    (
        "migrations/mysql/0007_batch_queue.sql",
        "a2919f25bbd39f905f28416060d2c63cb6ce32705413c254f5601f8ae296338a",
    ),
    (
        "migrations/mysql/0008_webhooks.sql",
        "99b12b71df2b16c3ce06c36f47282429232ea63b9b9bdb612b211b8e84b571b7",
    ),
    (
        "migrations/mysql/0009_obstacles.sql",
        "91de98c0b1ab2cf499b3748e51397e5bef86cddb62cfa3a636795cd47d8ceb5a",
    ),
    (
        "migrations/mysql/0010_lease_owners.sql",
        "c62fcc7bde182ce2ad06a81b153ba6bb89b5cdd752bfccc985382f0c03a212bc",
    ),
    (
        "migrations/mysql/0011_deploy_report_project.sql",
        "c24c384922c0ca4e4206847fc891a71d93e8d5aee5e20c7f54d58082bcbe3e3e",
    ),
    (
        "migrations/mysql/0012_outages.sql",
        "04af96bd0329eecd0e38d8ba278255aafd2302c314c9f4a3a0051140a945d672",
    ),
    (
        "migrations/mysql/0013_sealed_secrets.sql",
        "8d509ecc260ba88eee2213d2b1e354e805961d01ecce568c077af17e63451751",
    ),
    (
        "migrations/mysql/0014_retention.sql",
        "a92d48aee1613f1911c86a4b5162b45317129fcf1bc119f942a8be41e13ebca8",
    ),
    (
        "migrations/mysql/0015_trace_parent.sql",
        "063b45c80a8921dd0d640ed80b8291a3c94cf7a3acc99c2235bb11984895fdbf",
    ),
    (
        "migrations/mysql/0016_listing_and_retention_indexes.sql",
        "6531902780bc4eec7d50d521060b141fdaefbaef99fdbf8fcfe873c91acecfd3",
    ),
    (
        "migrations/mysql/0017_audit_outcome.sql",
        "17521958329d0a019ce1fc2420846f1339473ccca4611ad1f11cf76c0c367cfa",
    ),
    (
        "migrations/mysql/0018_operation_relation.sql",
        "e27302a575675f2fd35da957027617d6a42efd290383c9ddaead0e55d80f8c85",
    ),
    (
        "migrations/mysql/0019_timeline_events.sql",
        "5e1779129e57f2c95c136afabdf42f56228bd96b561641e528b57218a1a6ddb5",
    ),
    (
        "migrations/mysql/0020_batch_numbers.sql",
        "db7ef00e159edc942e61fcb9baaa31bd53d48be10d6fb79cc1337b8fc4093078",
    ),
    (
        "migrations/mysql/0021_merge_train.sql",
        "891f014fae620c24b3fe4d1679e4200002f1c086f1c2aec049ebe04e77b09f1d",
    ),
    (
        "migrations/mysql/0022_requester_controls.sql",
        "3044766d581835635079c84e63a6ad4014abcd69ed3771988d3bc50ec65c6497",
    ),
    (
        "migrations/mysql/0023_drift.sql",
        "e1f25ebf51723d94a3ceca9f80d1bc060cbb0802775ceed79f4d82b535093415",
    ),
    (
        "migrations/mysql/0024_ci_history.sql",
        "6d88d7bc0f6821f8ca12d1e45cce979b4b58212af98223ddc0f4db00f9ed5dae",
    ),
    (
        "migrations/sqlite/0001_state_store.sql",
        "d2492dcb3a0c0e9057ce11b3ab8401f9855ccded6feeff2c84a0eb737109325d",
    ),
    (
        "migrations/sqlite/0002_event_outbox.sql",
        "e9082d3cd016f7c1820f871628d8e59f57397f212a526f8c90d386318a80f44d",
    ),
    (
        "migrations/sqlite/0003_idempotency.sql",
        "6730a3c1a86715c1c2a53467fbc1c2508149b8eeb07b747feb91776aab415b79",
    ),
    (
        "migrations/sqlite/0004_callbacks.sql",
        "03ac8be7b150049f06a59ad0ca7442b36d9e029cd02bf7177af6e3bf63e88d04",
    ),
    (
        "migrations/sqlite/0005_audit.sql",
        "8daa3308dbfcce051a5027cc495562be425b66f23825bdffbcf85e056af0494b",
    ),
    (
        "migrations/sqlite/0006_durable_steps.sql",
        "01886ab9499abea5ea60baa4e1a157c3b50f958c32d99b45fc040d26701fe4a2",
    ),
    (
        "migrations/sqlite/0007_batch_queue.sql",
        "ebd80a59cba986d711e260f23092a68d2c11025e6005642bf8cc4b2b2ef484f0",
    ),
    (
        "migrations/sqlite/0008_webhooks.sql",
        "6eed7d3f5a1067f3474de1b02b8ec3ed2777733885fe18748389578ba6b0f5f4",
    ),
    (
        "migrations/sqlite/0009_obstacles.sql",
        "a4143bdb1f012045a9e9da9f3d574d11fff36dd47bf468d0a1cf61dd7f6f139b",
    ),
    (
        "migrations/sqlite/0010_lease_owners.sql",
        "ac7dab1179618ebf7eb69652dec3dbc1c524b280ace04e361da7d5ac4f09d187",
    ),
    (
        "migrations/sqlite/0011_deploy_report_project.sql",
        "5ad4547d8d2d8dbb02d7c8829fd6474cc3a198bcb64b5a0cc6b48b5a2c1ddab8",
    ),
    (
        "migrations/sqlite/0012_outages.sql",
        "d385f50b6c7ade04113d407bf6ee7598b63d63ebc16f7d56a97dc65fd3bfdeb4",
    ),
    (
        "migrations/sqlite/0013_sealed_secrets.sql",
        "98809ed3af639bd74c881fff09a16a119ccfbdd457bb0358384ef9cfa99796bb",
    ),
    (
        "migrations/sqlite/0014_retention.sql",
        "aa8ea017f7c85757b0171e7df9524c295be5cfbbca661c2a6f24ffaa05fbaebd",
    ),
    (
        "migrations/sqlite/0015_trace_parent.sql",
        "2bc693a7c938d5d0dd4c799de8a9eac17e39639386e70c579d56478012525d62",
    ),
    (
        "migrations/sqlite/0016_listing_and_retention_indexes.sql",
        "0a075440d25c5d933d7f50c5db7cd285d1531c2a0f1b19f194d40a945e926d52",
    ),
    (
        "migrations/sqlite/0017_audit_outcome.sql",
        "0d90f05f04e246a3cd9f5983672f44caa73c2b2f7fcb1339b922e52ad30e24ed",
    ),
    (
        "migrations/sqlite/0018_operation_relation.sql",
        "47920bf4f5884a1c98a952ffe5533df0a871e2871e62ed56e443ee6e680a3e46",
    ),
    (
        "migrations/sqlite/0019_timeline_events.sql",
        "242612b317a7b68d486ce276efe9e423d6afab8232f5b477f9153596bf60c670",
    ),
    (
        "migrations/sqlite/0020_batch_numbers.sql",
        "bbafa0070af07ff8ed50d6e7e8a52c5538ed01611d5a6044bc3434fc90ec9cde",
    ),
    (
        "migrations/sqlite/0021_merge_train.sql",
        "38531dc3be33f5bbb7c78908f6bc9bdcf781ce37a8e08f4ce0d608572c438545",
    ),
    (
        "migrations/sqlite/0022_requester_controls.sql",
        "4ecbf7e93543452fb97d85d57a0b719bde1fcad9d00550afb32c963a879d4ee7",
    ),
    (
        "migrations/sqlite/0023_drift.sql",
        "3204a4cb3f8974e392becc598cdc55f324d9dd754e237681bc6236973a0981f8",
    ),
    (
        "migrations/sqlite/0024_ci_history.sql",
        "191975279701f2804170f4f2a595abe08ae55ba6be9d7cb1865f73dbf061ef12",
    ),
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn no_released_migration_changed_and_every_migration_is_recorded() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for backend in ["mysql", "sqlite"] {
        for entry in std::fs::read_dir(root.join("migrations").join(backend)).unwrap() {
            let path = entry.unwrap().path();
            let name = format!(
                "migrations/{backend}/{}",
                path.file_name().unwrap().to_string_lossy()
            );
            let digest = hex(&Sha256::digest(std::fs::read(&path).unwrap()));
            match RELEASED.iter().find(|(released, _)| *released == name) {
                Some((_, recorded)) => assert_eq!(
                    &digest, recorded,
                    "{name} changed after its release: put the change in a new migration"
                ),
                None => {
                    panic!("{name} is not recorded: add (\"{name}\", \"{digest}\") to RELEASED")
                }
            }
            found.push(name);
        }
    }
    for (released, _) in RELEASED {
        assert!(
            found.iter().any(|name| name == released),
            "{released} was released and is gone: released migrations are never removed"
        );
    }
}

#[tokio::test]
async fn a_database_a_newer_release_migrated_further_still_opens() {
    for test_db in crate::helpers::each_backend().await {
        changegate::with_pool!(&test_db.db, writer, |pool| {
            sqlx::query(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                 VALUES (99990101000000, 'from a newer release', TRUE, X'00', 1)",
            )
            .execute(pool)
            .await
            .map(drop)
            .unwrap()
        });
        let reopened = changegate::db::open(&crate::helpers::database_settings(&test_db.url)).await;
        assert!(reopened.is_ok(), "{}: {:?}", test_db.name, reopened.err());
    }
}
