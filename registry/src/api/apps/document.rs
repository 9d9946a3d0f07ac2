//! What the app routes do to an app document (`apps/<key>`, a `v1::App` as JSON), apart from
//! storing it: generate keys and secrets, hide the secret, grant and revoke APIs, apply a
//! patch, and shape the one answer that shows a secret.

use crate::error::{ApiError, ApiResult};
use portico_control::v1;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// A new random secret: 24 random bytes as 48 hex digits.
pub fn new_secret() -> ApiResult<String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::internal(format!("no randomness: {e}")))?;
    Ok(hex::encode(bytes))
}

/// A new random app key: `app-` and 16 hex digits.
pub fn new_app_key() -> ApiResult<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::internal(format!("no randomness: {e}")))?;
    Ok(format!("app-{}", hex::encode(bytes)))
}

/// An app document without its secret (what every read answers).
pub fn redacted(value: &Value) -> Value {
    let mut v = value.clone();
    if let Some(obj) = v.as_object_mut() {
        obj.remove("secret");
    }
    v
}

/// The answer that shows a secret, once: after creating an app and after rotating its secret.
pub fn credentials(key: &str, secret: &str, version: i32, app: &Value) -> Value {
    json!({
        "app_key": key,
        "secret": secret,
        "etag": version.to_string(),
        "app": redacted(app),
    })
}

/// The body of `POST /apps`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppCreate {
    #[serde(default)]
    app_key: Option<String>,
    #[serde(default)]
    name: Option<String>,
    /// A chosen secret (at least 8 characters); generated when absent.
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    status: Option<v1::AppStatus>,
    #[serde(default)]
    apis: Option<Vec<String>>,
    #[serde(default)]
    rate_limits: Option<Vec<v1::AppRateLimit>>,
    #[serde(default)]
    topics: Option<Vec<String>>,
    #[serde(default)]
    callback_url: Option<String>,
}

impl AppCreate {
    /// The new app's key (given or generated) and document (secret given or generated; active
    /// and granted nothing unless said otherwise).
    pub fn into_app(self) -> ApiResult<(String, v1::App)> {
        let key = match self.app_key {
            Some(k) => k,
            None => new_app_key()?,
        };
        let secret = match self.secret {
            Some(s) => s,
            None => new_secret()?,
        };
        let app = v1::App {
            secret,
            status: self.status.unwrap_or_default(),
            apis: self.apis.unwrap_or_default(),
            rate_limits: self.rate_limits.unwrap_or_default(),
            name: self.name,
            topics: self.topics.unwrap_or_default(),
            callback_url: self.callback_url,
        };
        Ok((key, app))
    }
}

/// The body of `PATCH /apps/{app_key}`: the fields to replace (never the secret).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppPatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    status: Option<v1::AppStatus>,
    #[serde(default)]
    apis: Option<Vec<String>>,
    #[serde(default)]
    rate_limits: Option<Vec<v1::AppRateLimit>>,
    #[serde(default)]
    topics: Option<Vec<String>>,
    #[serde(default)]
    callback_url: Option<String>,
}

impl AppPatch {
    /// Replaces the fields the patch names; leaves the others (unknown ones included) as they
    /// are.
    pub fn apply(self, app: &mut Map<String, Value>) {
        if let Some(name) = self.name {
            app.insert("name".to_owned(), Value::String(name));
        }
        if let Some(status) = self.status {
            set_status(app, status);
        }
        if let Some(apis) = self.apis {
            app.insert("apis".to_owned(), json!(apis));
        }
        if let Some(limits) = self.rate_limits {
            app.insert("rate_limits".to_owned(), json!(limits));
        }
        if let Some(topics) = self.topics {
            app.insert("topics".to_owned(), json!(topics));
        }
        if let Some(url) = self.callback_url {
            app.insert("callback_url".to_owned(), json!(url));
        }
    }
}

/// Sets the app's status.
pub fn set_status(app: &mut Map<String, Value>, status: v1::AppStatus) {
    app.insert("status".to_owned(), json!(status));
}

/// The API ids an app is granted (`*`: all), in order; non-strings are ignored.
pub fn granted_apis(app: &Map<String, Value>) -> Vec<String> {
    app.get("apis")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Grants `ids` in addition to what the app has: new ones appended in order, none twice.
pub fn grant(app: &mut Map<String, Value>, ids: Vec<String>) {
    let mut apis = granted_apis(app);
    for id in ids {
        if !apis.contains(&id) {
            apis.push(id);
        }
    }
    app.insert("apis".to_owned(), json!(apis));
}

/// Revokes `ids`; the others keep their order. Revoking `*` revokes the grant of all, not the
/// ids granted one by one.
pub fn revoke(app: &mut Map<String, Value>, ids: &[String]) {
    let apis: Vec<String> = granted_apis(app)
        .into_iter()
        .filter(|a| !ids.contains(a))
        .collect();
    app.insert("apis".to_owned(), json!(apis));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn reads_never_show_the_secret() {
        let doc = json!({"secret": "s3cr3t-value", "status": "active", "apis": ["*"]});
        let shown = redacted(&doc);
        assert_eq!(shown, json!({"status": "active", "apis": ["*"]}));
        assert!(!shown.to_string().contains("s3cr3t"));
        // The one answer that shows it keeps the app itself redacted.
        let c = credentials("k", "s3cr3t-value", 4, &doc);
        assert_eq!(c["secret"], "s3cr3t-value");
        assert_eq!(c["etag"], "4");
        assert!(c["app"].get("secret").is_none());
        // Not an object: left as is.
        assert_eq!(redacted(&json!("x")), json!("x"));
    }

    #[test]
    fn grants_append_once_and_revokes_keep_order() {
        let mut a = app(json!({"apis": ["a", "b"], "secret": "x"}));
        grant(&mut a, ids(&["b", "c", "c", "d"]));
        assert_eq!(granted_apis(&a), ids(&["a", "b", "c", "d"]));
        revoke(&mut a, &ids(&["a", "c", "zzz"]));
        assert_eq!(granted_apis(&a), ids(&["b", "d"]));
        // Revoking `*` removes the grant of all only.
        let mut star = app(json!({"apis": ["*", "x"]}));
        revoke(&mut star, &ids(&["*"]));
        assert_eq!(granted_apis(&star), ids(&["x"]));
        // No `apis` yet (or not a list): starts from none.
        let mut fresh = app(json!({"secret": "x"}));
        assert!(granted_apis(&fresh).is_empty());
        grant(&mut fresh, ids(&["*"]));
        assert_eq!(fresh["apis"], json!(["*"]));
        assert_eq!(fresh["secret"], "x", "other fields untouched");
    }

    #[test]
    fn keys_and_secrets_are_random_and_well_formed() {
        let (k1, k2) = (new_app_key().unwrap(), new_app_key().unwrap());
        assert_ne!(k1, k2);
        assert!(k1.starts_with("app-") && k1.len() == 20, "{k1}");
        crate::input::check_name("app key", &k1).unwrap();
        let (s1, s2) = (new_secret().unwrap(), new_secret().unwrap());
        assert_ne!(s1, s2);
        assert_eq!(s1.len(), 48);
        assert!(s1.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn creation_fills_what_is_not_given() {
        let req: AppCreate = serde_json::from_value(json!({})).unwrap();
        let (key, app) = req.into_app().unwrap();
        assert!(key.starts_with("app-"));
        assert_eq!(app.secret.len(), 48);
        assert_eq!(app.status, v1::AppStatus::Active);
        assert!(app.apis.is_empty());
        let req: AppCreate = serde_json::from_value(json!({
            "app_key": "merchant-9", "secret": "chosen-secret", "status": "disabled", "apis": ["a"]
        }))
        .unwrap();
        let (key, app) = req.into_app().unwrap();
        assert_eq!(
            (key.as_str(), app.secret.as_str()),
            ("merchant-9", "chosen-secret")
        );
        assert_eq!(app.status, v1::AppStatus::Disabled);
        assert_eq!(app.apis, ids(&["a"]));
        assert!(serde_json::from_value::<AppCreate>(json!({"nope": 1})).is_err());
    }

    #[test]
    fn patches_replace_only_what_they_name() {
        let mut a = app(
            json!({"secret": "x", "name": "old", "status": "active", "apis": ["a"], "extra": 1}),
        );
        let patch: AppPatch =
            serde_json::from_value(json!({"status": "disabled", "apis": []})).unwrap();
        patch.apply(&mut a);
        assert_eq!(
            Value::Object(a),
            json!({"secret": "x", "name": "old", "status": "disabled", "apis": [], "extra": 1})
        );
        assert!(serde_json::from_value::<AppPatch>(json!({"secret": "y"})).is_err());
    }
}
