-- Webhook signing secrets are stored sealed (AES-256-GCM, see
-- src/sealing.rs): `sealed:v1:<key id>:<base64 of nonce, ciphertext, tag>`,
-- about 120 characters for a generated secret. Room to spare: a secret
-- handed over by a subscriber may be longer. The schema change is safe
-- while instances of the previous release run (expand only: the columns
-- only grow, in place); the sealing the new release then does is not,
-- since they cannot open a sealed secret (README, "Upgrades").
ALTER TABLE webhook_endpoint
    MODIFY secret VARCHAR(255) NOT NULL,
    MODIFY previous_secret VARCHAR(255) NULL;
