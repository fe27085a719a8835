//! Accounts and token authentication: `PRIVATE-TOKEN` (or `Authorization: Bearer`) names
//! the caller, whose identity the approval and merge rules are relative to.

use std::collections::{BTreeMap, HashMap};

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::SimContext;
use super::error::ApiError;
use super::state::{Ids, UserId};
use serde_json::{Value, json};

/// The authenticated user of a request; extracting it answers GitLab's 401 otherwise.
#[derive(Clone, Copy, Debug)]
pub struct Caller(pub UserId);

impl FromRequestParts<SimContext> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &SimContext) -> Result<Self, ApiError> {
        let token = token_of(&parts.headers).ok_or(ApiError::Unauthorized)?;
        let user = ctx.lock().users.by_token(token);
        user.map(Caller).ok_or(ApiError::Unauthorized)
    }
}

/// The token a request authenticates with: `PRIVATE-TOKEN`, else `Authorization: Bearer`.
pub fn token_of(headers: &HeaderMap) -> Option<&str> {
    let private = headers.get("private-token");
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    private
        .and_then(|value| value.to_str().ok())
        .or(bearer)
        .map(str::trim)
}

/// A registered account.
#[derive(Clone, Debug)]
pub struct User {
    pub id: UserId,
    pub username: String,
    pub web_url: String,
    /// GitLab's placeholder image for a user without an avatar, as a full URL
    /// (`user/basic.json` requires a string).
    pub avatar_url: String,
}

/// Accounts and their tokens.
#[derive(Debug, Default)]
pub struct Users {
    by_id: BTreeMap<UserId, User>,
    by_token: HashMap<String, UserId>,
}

impl Users {
    /// Registers a user, or adds `token` to the existing user of that name.
    pub fn add(&mut self, ids: &mut Ids, username: &str, token: &str, base_url: &str) -> UserId {
        let existing = self.by_id.values().find(|user| user.username == username);
        let id = match existing {
            Some(user) => user.id,
            None => {
                let id = ids.user();
                let web_url = format!("{base_url}/{username}");
                let avatar_url = format!("{base_url}/assets/no_avatar.png");
                let username = username.to_owned();
                self.by_id.insert(
                    id,
                    User {
                        id,
                        username,
                        web_url,
                        avatar_url,
                    },
                );
                id
            }
        };
        self.by_token.insert(token.to_owned(), id);
        id
    }

    /// Revokes `token`: GitLab answers 401 to it from then on
    /// (doc/api/personal_access_tokens.md, "Revoke a personal access token").
    pub fn revoke(&mut self, token: &str) {
        self.by_token.remove(token);
    }

    /// The user a token authenticates.
    pub fn by_token(&self, token: &str) -> Option<UserId> {
        self.by_token.get(token).copied()
    }

    /// The username a token authenticates.
    pub fn username_of(&self, token: &str) -> Option<&str> {
        let user = self.get(self.by_token(token)?)?;
        Some(&user.username)
    }

    /// A registered user.
    pub fn get(&self, id: UserId) -> Option<&User> {
        self.by_id.get(&id)
    }

    /// `UserBasic`, or `null` for an unknown id.
    pub fn json(&self, id: Option<UserId>) -> Value {
        match id.and_then(|id| self.get(id)) {
            Some(user) => json!({
                "id": user.id,
                "username": user.username,
                "name": user.username,
                "state": "active",
                "locked": false,
                "avatar_url": user.avatar_url,
                "web_url": user.web_url,
            }),
            None => Value::Null,
        }
    }
}
