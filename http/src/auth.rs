//! Per-project API keys (DESIGN.md §7 "Auth"): `Authorization: Bearer <key>`, stored only as SHA-256.
//! A key sees its own project and nothing else. With no keys configured every request is the `default`
//! project with every scope — which is why the server then binds loopback only.

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use driftline_schemas::ProjectName;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Send spans and tool lists.
    Ingest,
    /// Query everything of the project.
    Read,
    /// Accept baselines and change settings (includes read).
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Ingest => "ingest",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    pub project: ProjectName,
    pub scopes: Vec<Scope>,
    /// Lowercase hex SHA-256 of the key.
    pub sha256: String,
}

/// Who is calling: the project every query is filtered by, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub project: ProjectName,
    /// Names the caller in audit records (accepted_by): `key:<first 8 hex of the key hash>` or `local`.
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing or invalid API key: send `Authorization: Bearer <key>`")]
    Unauthenticated,
    #[error("this API key lacks the `{0}` scope")]
    Forbidden(&'static str),
}

#[derive(Debug, Clone, Default)]
pub struct Auth {
    keys: Vec<ApiKey>,
}

/// The project of every request when no keys are configured.
pub fn open_project() -> ProjectName {
    ProjectName::default_project()
}

pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

impl Auth {
    pub fn new(keys: Vec<ApiKey>) -> Self {
        Auth { keys: keys.into_iter().map(|k| ApiKey { sha256: k.sha256.to_lowercase(), ..k }).collect() }
    }

    /// No keys: the server is open, and must bind loopback only.
    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn authorize(&self, headers: &HeaderMap, scope: Scope) -> Result<Principal, AuthError> {
        if self.is_open() {
            return Ok(Principal { project: open_project(), name: "local".to_owned() });
        }
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            // The scheme is case-insensitive (RFC 9110 §11.1): `bearer` and `BEARER` are Bearer too.
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or(AuthError::Unauthenticated)?;
        let digest = hash_key(token);
        let key = self.keys.iter().find(|k| k.sha256 == digest).ok_or(AuthError::Unauthenticated)?;
        let allowed =
            key.scopes.contains(&scope) || (scope == Scope::Read && key.scopes.contains(&Scope::Admin));
        if !allowed {
            return Err(AuthError::Forbidden(scope.as_str()));
        }
        Ok(Principal { project: key.project.clone(), name: format!("key:{}", &digest[..8]) })
    }
}

/// The scope a [`Caller`] was authorized for, as a type, so that a handler states what it needs in its
/// signature and cannot forget to check.
pub trait RequiredScope: Send + Sync {
    const SCOPE: Scope;
}

/// Marks [`Caller`]s that may read their project.
pub struct ReadScope;
/// Marks [`Caller`]s that may accept baselines and change settings.
pub struct AdminScope;
/// Marks [`Caller`]s that may send spans and tool lists.
pub struct IngestScope;

impl RequiredScope for ReadScope {
    const SCOPE: Scope = Scope::Read;
}
impl RequiredScope for AdminScope {
    const SCOPE: Scope = Scope::Admin;
}
impl RequiredScope for IngestScope {
    const SCOPE: Scope = Scope::Ingest;
}

/// The caller of a handler, authorized for `S` before the handler runs (401 without a valid key, 403
/// without the scope). Taken as the handler's first extractor after the state, so that no path, query or
/// body of an unauthorized request is read.
pub struct Caller<S: RequiredScope>(Principal, PhantomData<S>);

/// A caller who may read.
pub type Reader = Caller<ReadScope>;
/// A caller who may change baselines and settings.
pub type Admin = Caller<AdminScope>;
/// A caller who may send data.
pub type Ingester = Caller<IngestScope>;

impl<S: RequiredScope> Caller<S> {
    pub fn into_principal(self) -> Principal {
        self.0
    }
}

impl<S: RequiredScope> Deref for Caller<S> {
    type Target = Principal;

    fn deref(&self) -> &Principal {
        &self.0
    }
}

impl<S: RequiredScope, State: Send + Sync> FromRequestParts<State> for Caller<S>
where
    Arc<Auth>: FromRef<State>,
{
    type Rejection = crate::ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Self, Self::Rejection> {
        let auth = Arc::<Auth>::from_ref(state);
        Ok(Caller(auth.authorize(&parts.headers, S::SCOPE)?, PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(token: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(token) = token {
            headers.insert(
                header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
            );
        }
        headers
    }

    fn check(auth: &Auth, token: Option<&str>, scope: Scope, expected: Result<&str, AuthError>) {
        let got = auth.authorize(&headers(token), scope).map(|p| p.project);
        assert_eq!(got.as_deref().map_err(Clone::clone), expected, "{token:?} {scope:?}");
    }

    #[test]
    fn keys_scopes_and_projects() {
        let auth = Auth::new(vec![
            ApiKey {
                project: "a".parse().expect("a valid name"),
                scopes: vec![Scope::Ingest],
                sha256: hash_key("ingest-a"),
            },
            ApiKey {
                project: "b".parse().expect("a valid name"),
                scopes: vec![Scope::Admin],
                sha256: hash_key("admin-b").to_uppercase(),
            },
        ]);
        check(&auth, Some("ingest-a"), Scope::Ingest, Ok("a"));
        check(&auth, Some("ingest-a"), Scope::Read, Err(AuthError::Forbidden("read")));
        check(&auth, Some("admin-b"), Scope::Read, Ok("b"));
        check(&auth, Some("admin-b"), Scope::Admin, Ok("b"));
        check(&auth, Some("admin-b"), Scope::Ingest, Err(AuthError::Forbidden("ingest")));
        check(&auth, Some("nope"), Scope::Read, Err(AuthError::Unauthenticated));
        check(&auth, None, Scope::Read, Err(AuthError::Unauthenticated));
    }

    #[test]
    fn without_keys_everything_is_the_default_project() {
        check(&Auth::default(), None, Scope::Admin, Ok("default"));
    }
}
