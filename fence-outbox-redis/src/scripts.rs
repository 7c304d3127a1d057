//! The outbox's Lua scripts: fence-redis's prelude, the outbox helpers, then one body each.

use std::sync::LazyLock;

use fence_redis::unstable::RedisScript;
use fence_redis::FencedBody;

const COMMON: &str = include_str!("lua/common.lua");

fn script(name: &'static str, body: &str) -> RedisScript {
    RedisScript::new(name, &format!("{COMMON}\n{body}"))
}

/// The transition body around a user's Lua, run in fence-redis's fenced envelope.
pub(crate) fn transition(user_lua: &str) -> FencedBody {
    let body = include_str!("lua/transition.lua");
    FencedBody::with_user_script("outbox transition", COMMON, body, user_lua)
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
    REDRIVE => "redrive",
}
