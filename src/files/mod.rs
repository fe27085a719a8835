//! The files a binding becomes in the configuration repository: each
//! target's layout (a file per binding, rendered from a template in the
//! repository's own format, or one key of a shared file), parameters checked
//! against the target's schema, and the documents read and edited keeping
//! what people wrote in them.

pub mod document;
pub mod layout;
pub mod params;
pub mod template;
