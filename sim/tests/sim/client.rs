//! The HTTP clients the tests play changegate with. reqwest is built without a TLS provider
//! of its own, so a bare `reqwest::Client::new()` would panic: these get the simulators'
//! own TLS configuration (ring, the platform's roots).

/// A builder to add timeouts to.
pub(crate) fn builder() -> reqwest::ClientBuilder {
    changegate_sim::tls::client_builder(None).expect("the platform's roots load")
}

/// A client with reqwest's defaults.
pub(crate) fn client() -> reqwest::Client {
    builder().build().expect("client builds")
}
