//! The Lua scripts, one per operation, each the shared prelude plus its body.

use std::sync::LazyLock;

const PRELUDE: &str = include_str!("lua/prelude.lua");
const USER_MARKER: &str = "--USER-SCRIPT--";

/// A script with its SHA1, called by `EVALSHA` with an `EVAL` fallback on `NOSCRIPT`.
#[derive(Debug)]
pub(crate) struct LuaScript {
    pub(crate) name: &'static str,
    pub(crate) code: String,
    pub(crate) sha: String,
}

impl LuaScript {
    pub(crate) fn with_prelude(name: &'static str, body: &str) -> Self {
        let code = format!("{PRELUDE}\n{body}");
        let sha = redis::Script::new(&code).get_hash().to_owned();
        LuaScript { name, code, sha }
    }

    /// The fenced wrapper around a user's Lua body.
    pub(crate) fn fenced_user_script(user_body: &str) -> Self {
        let body = include_str!("lua/fenced_script.lua").replacen(USER_MARKER, user_body, 1);
        Self::with_prelude("fenced user script", &body)
    }
}

macro_rules! scripts {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            pub(crate) static $name: LazyLock<LuaScript> =
                LazyLock::new(|| LuaScript::with_prelude($file, include_str!(concat!("lua/", $file, ".lua"))));
        )*
    };
}

scripts! {
    WRITE => "write",
    CLAIM => "claim",
    READ => "read",
    LEASE_ACQUIRE => "lease_acquire",
    LEASE_RENEW => "lease_renew",
    ISSUE => "issue",
}
