//! The outbox's Lua scripts: fence-redis's prelude, the outbox helpers, then one body each.

use std::sync::LazyLock;

use fence_redis::RedisScript;

const COMMON: &str = include_str!("lua/common.lua");
const USER_MARKER: &str = "--USER-SCRIPT--";

fn script(name: &'static str, body: &str) -> RedisScript {
    RedisScript::new(name, &format!("{COMMON}\n{body}"))
}

/// The transition script around a user's Lua body.
pub(crate) fn transition(user_body: &str) -> RedisScript {
    let body = include_str!("lua/transition.lua").replacen(USER_MARKER, user_body, 1);
    script("outbox transition", &body)
}

macro_rules! scripts {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            pub(crate) static $name: LazyLock<RedisScript> =
                LazyLock::new(|| script($file, include_str!(concat!("lua/", $file, ".lua"))));
        )*
    };
}

scripts! {
    PENDING => "pending",
    LIST => "list",
    BEGIN => "begin",
    SETTLE => "settle",
    PURGE => "purge",
    FORGET => "forget",
    DISCARD => "discard",
}
