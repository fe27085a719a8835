//! Adapters for the systems changegate talks to, each with timeouts on every
//! call and retries where a retry is safe.

pub mod approval;
pub mod gitlab;

/// Makes ring rustls' process-wide crypto provider. reqwest is built without
/// a provider of its own (`rustls-no-provider`, so that HTTP and MySQL share
/// ring) and panics building a client until one is installed. Calling it
/// again does nothing.
pub fn install_tls_provider() {
    // An error only says that a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
